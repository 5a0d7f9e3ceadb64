// Paper row: "ELMo-C_CNN" of Li et al. (TACL 2019) Table 1, input-and-output variant: ELMo's
// character CNN (trained jointly, from scratch) is both the input layer and the source of the
// continuous targets: the head (512 -> 512) predicts the CNN embedding of the next word. The model
// detaches the target embeddings, so the CNN is trained through the input side only; a target
// side trained by the cosine loss as well could collapse to a constant vector.
//
//   ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc_cnn_cnn.jsonnet -s runs/elmoc_cnn_cnn --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmoc_cnn_cnn', {
  // No fastText: the CNN gives inputs and targets (embedding_dim is unused but required).
  embedding_dim: 512,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
