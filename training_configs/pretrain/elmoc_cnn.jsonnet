// Paper row: "ELMo-C_CNN" of Li et al. (TACL 2019) Table 1, input variant: ELMo's character CNN
// (allennlp's `character_encoding` + `cnn-highway`, 2048 filters, 2 highway layers, projected to
// 512) as the input layer, trained jointly with the encoder; the continuous output layer still
// predicts frozen fastText vectors. (The paper's ELMo-C_CNN takes the CNN from a trained ELMo;
// here it is learned from scratch.) See elmoc_cnn_cnn.jsonnet for the CNN as input and output.
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc_cnn.jsonnet -s runs/elmoc_cnn --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmoc_cnn', {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
