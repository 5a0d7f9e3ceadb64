// Paper row: "ELMo-A" of Li et al. (TACL 2019) Table 1, the "Adaptive" output layer of Table 4:
// the ELMo-C encoder and fastText input with an adaptive softmax (Grave et al. 2017) over the
// 793,471-word vocabulary instead of the continuous output. 195.9M trainable parameters (paper:
// 196M). For Table 4's other vocabulary sizes override the cap and the cutoffs, e.g. 40K:
//   -o '{"vocabulary.max_vocab_size.targets": 40000,
//        "model.output_layer.cutoffs": [10000, 20000, 30000], "model.output_layer.div_value": 1}'
// and 2,000K: max_vocab_size 2000000, cutoffs [100000, 400000, 1850000], div_value 4.
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmo_a.jsonnet -s runs/elmo_a --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('elmo_a', {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
