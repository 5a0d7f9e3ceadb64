// Paper row: "ELMo-C_OneB" of Li et al. (TACL 2019) Table 1: ELMo-C whose input and output
// vectors are fastText trained on the pretraining corpus itself (One Billion Word) rather than
// on Common Crawl. The model is elmoc.jsonnet's (76M); only the vectors differ. Train them with
// the project's helper (fastText's published settings: skipgram, 300-d, n-grams 3-6):
//
//   python -c "from elmoc_allennlp.fasttext.training import train_fasttext; \
//              train_fasttext('oneb_train.txt', 'oneb-300d.bin', dim=300)"
//   ELMOC_FASTTEXT=oneb-300d.bin ELMOC_TRAIN_DATA=... ELMOC_VALIDATION_DATA=... \
//   allennlp train training_configs/pretrain/elmoc_oneb.jsonnet -s runs/elmoc_oneb --include-package elmoc_allennlp
//
// (The quickstart's elmoc_small.jsonnet is ELMo-C_OneB at small scale: its fastText is trained
// on the PTB text it pretrains on.)
local baselines = import 'baselines.libsonnet';

baselines.variant('elmoc_oneb', {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: 300,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
})
