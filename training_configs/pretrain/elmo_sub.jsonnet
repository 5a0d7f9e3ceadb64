// Paper row: "ELMo-Sub" of Li et al. (TACL 2019) Table 1, the "Subword" output layer of Table 4:
// a subword-level biLM. The corpus is split into 32,000 SentencePiece BPE pieces (trained on the
// training corpus on first use and cached; see `elmoc_sentencepiece_bpe` in
// elmoc_allennlp/data/tokenizers/sentencepiece_bpe_tokenizer.py); the input is a 512-d lookup
// table trained from scratch and tied to the output embedding of a full softmax over the pieces.
// 92.2M trainable parameters (paper: 92M). For downstream use a word is represented by its first
// piece (`SentencePieceBpeTokenizer.tokenize_words`).
//
//   ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmo_sub.jsonnet -s runs/elmo_sub --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmo_sub', {
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
