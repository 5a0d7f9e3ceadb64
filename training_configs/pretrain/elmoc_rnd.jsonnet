// Paper row: "ELMo-C_Rnd" of Li et al. (TACL 2019) Table 1: ELMo-C with fastText input but a
// random output embedding: every word of the training corpus gets a frozen N(0, 1) 300-d target
// vector (words never seen in training share the @@UNKNOWN@@ one). Same 76M trainable
// parameters as ELMo-C.
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc_rnd.jsonnet -s runs/elmoc_rnd --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmoc_rnd', {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
