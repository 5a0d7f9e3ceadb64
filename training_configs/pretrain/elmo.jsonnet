// Paper row: "ELMo" of Li et al. (TACL 2019) Table 1 (and Table 4's whole-model baseline): the
// ELMo biLM of Peters et al. (2018) - character-CNN input (2048 filters, 2 highway layers,
// projected to 512) trained jointly, 2 x 4096 -> 512 LSTM without LayerNorm, sampled softmax over
// the 793,471-word One Billion Word vocabulary with 8192 log-uniform samples - trained with this
// project's reader, optimizer and schedule. ~501M trainable parameters (CNN 18M + encoder 75.7M +
// softmax 407M).
//
//   ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmo.jsonnet -s runs/elmo --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmo', {
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
