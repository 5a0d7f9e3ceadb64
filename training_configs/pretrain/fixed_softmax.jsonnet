// Paper row: "Fixed" of Li et al. (TACL 2019) Table 4 and section 5.2: a sampled softmax whose
// output embedding is the frozen fastText vector of each vocabulary word; the LSTM state is
// projected 512 -> 300 as in ELMo-C, so the only difference from ELMo-C is the loss (softmax over
// the vocabulary instead of cosine to the target vector). Trainable: ELMo-C's 76M plus one bias per
// word (0.8M at 793,471 words).
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/fixed_softmax.jsonnet -s runs/fixed --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('fixed', {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
