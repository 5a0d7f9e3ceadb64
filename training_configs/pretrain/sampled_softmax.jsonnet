// Paper row: "Sampled" of Li et al. (TACL 2019) Table 4: ELMo's output layer - a sampled softmax
// with 8192 log-uniform samples, accidental-hit removal and log-Q correction - on the ELMo-C
// encoder with fastText input (for sparse row updates see `sparse_softmax` in baselines.libsonnet).
// 482.8M trainable parameters at the 793,471-word vocabulary (paper: 483M); override the cap for
// 40K (96.2M, paper 96M) or 2,000K (1101.7M, paper 1102M):
//   -o '{"vocabulary.max_vocab_size.targets": 40000}'
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/sampled_softmax.jsonnet -s runs/sampled --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('sampled', {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
