// Paper row: "CC-CNN" of Li et al. (TACL 2019) Table 3: ELMo-C with fastText (Common Crawl)
// input and, as targets of the continuous output layer, the embeddings of the target words by
// the character CNN of a trained ELMo (frozen, 512-d): the heads map 512 -> 512. The CNN comes
// from ELMOC_ELMO_ARCHIVE, the model.tar.gz of an elmo.jsonnet run (same char CNN settings).
// Trainable: 76,402,688; the CNN's ~18M parameters are frozen.
//
//   ELMOC_ELMO_ARCHIVE=runs/elmo/model.tar.gz ELMOC_FASTTEXT=crawl-300d-2M-subword.bin \
//   ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc_cc_cnn.jsonnet -s runs/elmoc_cc_cnn --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmoc_cc_cnn', {
  elmo_archive: std.extVar('ELMOC_ELMO_ARCHIVE'),
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
