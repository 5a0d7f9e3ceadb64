// ELMo-C at paper size: Li, Chen, Hsieh, Chang, "Efficient Contextual Representation Learning With
// Continuous Outputs", TACL 2019 (https://arxiv.org/abs/1902.11269).
//
// Input and output: frozen fastText Common Crawl vectors with subword information
// (crawl-300d-2M-subword.bin, 300-d, ~4.8 GB; paper section 4). Encoder: 2-layer LSTM with
// projection, 4096 cells -> 512, LayerNorm in the recurrence. Output: continuous, cosine loss.
// Trainable parameters: 76M (paper Tables 2 and 4; tests/test_configs.py checks 76M +/- 1M).
// Data: One Billion Word Benchmark, 10 epochs (paper section 4); pass the shard glob, e.g.
//   ELMOC_TRAIN_DATA='1-billion-word/training-monolingual.tokenized.shuffled/news.en-*'
// Expected downstream scores with these embeddings (paper Table 2): SNLI 88.8, Coref 72.9,
// SST-5 53.80, NER 92.24, SRL 82.4.
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc.jsonnet -s runs/elmoc --include-package elmoc_allennlp \
//     -o '{"trainer": {"cuda_device": 0}}'
local elmoc = import 'elmoc.libsonnet';

elmoc.config({
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
