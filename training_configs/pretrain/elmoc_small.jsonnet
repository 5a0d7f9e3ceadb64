// ELMo-C scaled down to pretrain in minutes on 2 CPU cores (the README quickstart, `make demo`):
// the same model as elmoc.jsonnet (LayerNorm LSTM with projection, continuous output, cosine loss,
// Adam + RNMT+) with 2 layers of 512 cells -> 128, 100-d fastText vectors trained on the corpus
// itself, and one epoch. On the Penn Treebank LM text (~930k tokens) the quickstart's figures are
// in README.md.
//
//   ELMOC_FASTTEXT=ptb.bin ELMOC_TRAIN_DATA=ptb.train.txt ELMOC_VALIDATION_DATA=ptb.valid.txt \
//   allennlp train training_configs/pretrain/elmoc_small.jsonnet -s runs/small --include-package elmoc_allennlp
local elmoc = import 'elmoc.libsonnet';

elmoc.config({
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 100,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
  // The PTB LM text is lowercased (the quickstart also lowercases its number token N before
  // training fastText): downstream, the `elmoc_subwords` indexer then lowercases task text too.
  lowercase_tokens: true,
  projection_dim: 128,
  cell_dim: 512,
  batch_size: 64,
  num_epochs: 1,
  max_sequence_length: 100,
  learning_rate: 2e-3,
  // ~660 batches of 64 PTB sentences: hold lr0 (with n = 1 RNMT+ has no warm-up), then decay to
  // lr0 / 2 over the second half.
  warmup_steps: 0,
  decay_start: 330,
  decay_end: 660,
  num_replicas: 1,
})
