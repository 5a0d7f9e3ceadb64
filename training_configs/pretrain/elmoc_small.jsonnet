// ELMo-C scaled down to pretrain in minutes on 2 CPU cores (the README quickstart, `make demo`):
// the same model as elmoc.jsonnet (LayerNorm LSTM, continuous output, cosine loss, Adam + RNMT+)
// with 2 layers of 1024 cells -> 256 and 100-d fastText vectors trained on the corpus itself.
// On the Penn Treebank LM text (~930k tokens) the quickstart's figures are in README.md.
//
//   ELMOC_FASTTEXT=ptb.bin ELMOC_TRAIN_DATA=ptb.train.txt ELMOC_VALIDATION_DATA=ptb.valid.txt \
//   allennlp train training_configs/pretrain/elmoc_small.jsonnet -s runs/small --include-package elmoc_allennlp
local elmoc = import 'elmoc.libsonnet';

elmoc.config({
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 100,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
  projection_dim: 256,
  cell_dim: 1024,
  batch_size: 64,
  num_epochs: 3,
  max_sequence_length: 100,
  learning_rate: 1e-3,
  // ~660 batches per PTB epoch: warm up quickly, decay over the last epochs to lr0 / 2.
  warmup_steps: 200,
  decay_start: 700,
  decay_end: 2000,
  num_replicas: 1,
})
