// Not a paper row: the full softmax over the closed vocabulary (the reference the sampled and
// adaptive softmax approximate), on the ELMo-C encoder with fastText input. At the 793,471-word
// vocabulary it has as many parameters as "Sampled" (482.8M) but scores every word for every
// target; it is practical only for small vocabularies, e.g. -o '{"vocabulary.max_vocab_size.targets": 40000}'.
//
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/full_softmax.jsonnet -s runs/full --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';

baselines.variant('full', {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
