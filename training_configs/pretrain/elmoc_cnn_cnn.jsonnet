// Paper row: "CNN-CNN" of Li et al. (TACL 2019) Table 3: the character CNN of a trained ELMo
// (frozen, 512-d) is both the input layer and the source of the continuous targets: the heads
// (512 -> 512) predict the CNN embedding of the next (previous) word. The CNN comes from
// ELMOC_ELMO_ARCHIVE, the model.tar.gz of an elmo.jsonnet run (same char CNN settings). Frozen,
// it cannot collapse: a CNN trained along with the encoder learns to map every word to nearly
// the same vector (validation loss 0.002 within 20 batches on PTB), a trivial solution.
// Trainable: 76,356,096; the CNN's ~18M parameters are frozen.
//
//   ELMOC_ELMO_ARCHIVE=runs/elmo/model.tar.gz ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc_cnn_cnn.jsonnet -s runs/elmoc_cnn_cnn --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmoc_cnn_cnn', {
  elmo_archive: std.extVar('ELMOC_ELMO_ARCHIVE'),
  // No fastText: the CNN gives inputs and targets (embedding_dim is unused but required).
  embedding_dim: 512,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
