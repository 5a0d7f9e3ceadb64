// Paper row: "CNN-CC" of Li et al. (TACL 2019) Table 3: ELMo-C whose input layer is the
// character CNN of a trained ELMo (frozen; 2048 filters, 2 highway layers, projected to 512),
// with the continuous output layer predicting frozen fastText (Common Crawl) vectors. The CNN
// comes from ELMOC_ELMO_ARCHIVE, the model.tar.gz of an elmo.jsonnet run (same char CNN
// settings); it is copied in at construction and not trained. Trainable: 76,138,584 (the ELMo-C
// encoder with one 512 -> 512 input projection and a head per direction); the CNN's ~18M
// parameters are frozen.
//
//   ELMOC_ELMO_ARCHIVE=runs/elmo/model.tar.gz ELMOC_FASTTEXT=crawl-300d-2M-subword.bin \
//   ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc_cnn_cc.jsonnet -s runs/elmoc_cnn_cc --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmoc_cnn_cc', {
  elmo_archive: std.extVar('ELMOC_ELMO_ARCHIVE'),
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
