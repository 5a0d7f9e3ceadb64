// Paper row: "ELMo-C_CNN" of Li et al. (TACL 2019) Table 1, input-and-output variant: ELMo's
// character CNN (trained jointly, from scratch) is both the input layer and the source of the
// continuous targets: the head (512 -> 512) predicts the CNN embedding of the next word. The model
// detaches the target embeddings, so the CNN is trained through the input side only.
// WARNING: trained jointly like this, the model still collapses: on the quickstart PTB run the
// CNN learns to map every word to nearly the same vector and the validation cosine loss falls to
// 0.002 within 20 batches (a trivial solution, not a language model). The paper's ELMo-C_CNN uses
// the CNN of a *trained* ELMo, frozen; that needs ELMo's released weights (allennlp's
// `_ElmoCharacterEncoder` with options/weight files), which this config does not load.
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
