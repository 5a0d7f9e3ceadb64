// ELMo-C scaled down to pretrain in minutes on 2 CPU cores (the README quickstart, `make demo`):
// the model and recipe of elmoc.jsonnet (elmoc.libsonnet's defaults: per-direction input
// projection with bias + LayerNorm, LayerNorm LSTM with projection, one continuous output layer
// per direction, cosine loss, Adam eps 1e-6, no output dropout) with 2 layers of 512 cells ->
// 128, 100-d fastText vectors trained on the corpus itself, and one epoch. On the Penn Treebank
// LM text (~930k tokens) the quickstart's figures are in README.md. The values set here are
// ours, chosen for that budget:
//
//   ELMOC_FASTTEXT=ptb.bin ELMOC_TRAIN_DATA=ptb.train.txt ELMOC_VALIDATION_DATA=ptb.valid.txt \
//   allennlp train training_configs/pretrain/elmoc_small.jsonnet -s runs/small --include-package elmoc_allennlp
local elmoc = import 'elmoc.libsonnet';

local settings = {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 100,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
  // The PTB LM text is lowercased (the quickstart also lowercases its number token N before
  // training fastText): downstream, the `elmoc_bilm_inputs` indexer then lowercases task text too.
  lowercase_tokens: true,
  projection_dim: 128,
  cell_dim: 512,
  // Sentence mode: whole PTB sentences (at most 100 tokens), the way the biLM embeds text
  // downstream. Window mode (the paper's 20-token windows), otherwise equal, measured on PTB
  // valid: on whole sentences the two are equal (loss 0.3444 vs 0.3434 for sentence mode), and
  // each is better on its own format (windows: 0.3274 vs 0.3959); see README.md.
  max_sequence_length: 100,
  batch_size: 64,
  num_epochs: 1,
  // The published RNMT+ formula with n = 1 (the same curve as the authors' formula at n = 1),
  // placed by fractions of the run ('run_fractions'): hold lr0 = 2e-3 for the first half of the
  // run's steps, then halve it over the second half, whatever the corpus's length (the steps
  // come from the corpus index: ~660 batches of 64 PTB sentences an epoch, 204 for a corpus of
  // 211k tokens). The authors' batch-scaled rule would give lr0 * 64 / 128 = 5e-5, far too
  // small for one epoch on 0.9M tokens.
  learning_rate: 2e-3,
  decay_start_fraction: 0.5,
  decay_end_fraction: 1.0,
  num_replicas: 1,
};

// `settings` (hidden) lets baselines_small.jsonnet build every baseline at this scale.
elmoc.config(settings) + { settings:: settings }
