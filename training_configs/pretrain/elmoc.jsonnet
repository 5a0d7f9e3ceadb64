// ELMo-C at paper size: Li, Chen, Hsieh, Chang, "Efficient Contextual Representation Learning With
// Continuous Outputs", TACL 2019 (https://arxiv.org/abs/1902.11269), with the training recipe of
// the authors' released code (GitHub uclanlp/ELMO-C). Every value comes from elmoc.libsonnet's
// defaults, where each one cites its source; the README's "Config reference" tabulates them.
//
// Input and output: frozen fastText Common Crawl vectors with subword information
// (crawl-300d-2M-subword.bin, 300-d, ~4.8 GB; paper section 4; authors' config.json
// input_layer.embedding_model_path, input_size 300). Encoder: per direction, an input projection
// Linear(300, 512) with bias + LayerNorm, then 2 LSTM layers with projection, 4096 cells -> 512,
// LayerNorm in the recurrence (paper section 4.1). Output: one continuous layer per direction,
// cosine loss. The two directions share nothing but the frozen vectors, as the authors' two
// independent LMs (paper footnote 7).
// Trainable parameters: 76,185,176 (paper Tables 2 and 4: 76M;
// tests/training_configs/pretrain/test_elmoc_configs.py checks the exact count on the meta device).
// Data: One Billion Word Benchmark, 10 epochs (paper section 4), read as 20-token windows across
// sentence boundaries (paper section 5.2.2), 768 windows per batch and worker (paper Table 2).
// Schedule: the authors' (`elmoc_rnmt_plus`), from the global batch B = 768 x workers: peak lr
// 1e-4 * B / 128, decay from 1.6e8 to 8e8 windows. The paper trained on 4 GPUs (B = 3072):
//   -o '{"distributed": {"cuda_devices": [0, 1, 2, 3]}}'
// (each worker then computes both directions of its 768 windows; the authors ran one job per
// direction, which `directions: 'forward' / 'backward'` and `allennlp elmoc-merge-bilm` do).
// Pass the shard glob, e.g.
//   ELMOC_TRAIN_DATA='1-billion-word/training-monolingual.tokenized.shuffled/news.en-*'
// Expected downstream scores with these embeddings (paper Table 2): SNLI 88.8, Coref 72.9,
// SST-5 53.80, NER 92.24, SRL 82.4.
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc.jsonnet -s runs/elmoc --include-package elmoc_allennlp \
//     -o '{"trainer.cuda_device": 0}'
local elmoc = import 'elmoc.libsonnet';

elmoc.config({
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
