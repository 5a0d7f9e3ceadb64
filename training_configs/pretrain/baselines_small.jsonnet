// Every baseline of baselines.libsonnet (the rows of Li et al. 2019, Tables 1, 3 and 4) at the
// quickstart's scale: the settings of elmoc_small.jsonnet (sizes, data mode, schedule, 100-d
// corpus-trained fastText) for the PTB text of `make demo`. ELMOC_BASELINE picks the variant:
// elmo, elmo_a, elmo_sub, elmoc_oneb, elmoc_rnd, elmoc_cnn_cc, elmoc_cc_cnn, elmoc_cnn_cnn,
// sampled, fixed or full. The Table 3 rows (elmoc_cnn_cc, elmoc_cc_cnn, elmoc_cnn_cnn) also need
// ELMOC_ELMO_ARCHIVE, the model.tar.gz of an ELMOC_BASELINE=elmo run of this config.
// PTB's vocabulary has 10,000 words, so the closed vocabularies are uncapped, the adaptive
// softmax uses cutoffs [2000, 6000], the sampled softmax 4096 samples and ELMo-Sub 8,000 pieces
// (ours, for PTB).
//
// Measured (1 epoch on the first 10,000 lowercased PTB training sentences, PTB valid's first
// 1,000; the ELMo archive from the same data, validation perplexity 577): valid loss, cosine and
// retrieval accuracy, each next to what a constant prediction (the mean target direction) scores:
//   elmoc_small (fastText in, fastText targets) 0.3666, cos 0.633 (0.611), retrieval 0.058 (0.001)
//   elmoc_cnn_cc  (CNN in, fastText targets)    0.3767, cos 0.623 (0.611), retrieval 0.049 (0.001)
//   elmoc_cc_cnn  (fastText in, CNN targets)    0.2161, cos 0.784 (0.735), retrieval 0.004 (0.001)
//   elmoc_cnn_cnn (CNN in, CNN targets)         0.2218, cos 0.778 (0.735), retrieval 0.005 (0.001)
// No row collapses (each is above the constant prediction); the CNN targets of an ELMo this
// undertrained separate words poorly (retrieval 4-7x the constant's), unlike the trained ELMo of the paper's Table 3.
//
//   ELMOC_BASELINE=elmo_a ELMOC_FASTTEXT=quickstart_output/fasttext/ptb.bin \
//   ELMOC_TRAIN_DATA=quickstart_output/data/ptb.train.txt ELMOC_VALIDATION_DATA=quickstart_output/data/ptb.valid.txt \
//   allennlp train training_configs/pretrain/baselines_small.jsonnet -s runs/small_elmo_a --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';
// The quickstart model's settings, read from its config so the two stay in sync.
local small = import 'elmoc_small.jsonnet';

baselines.variant(std.extVar('ELMOC_BASELINE'), small.settings {
  // PTB-sized closed vocabularies and baselines.
  vocabulary_size: null,
  num_samples: 4096,
  cutoffs: [2000, 6000],
  div_value: 4.0,
  bpe_vocab_size: 8000,
  // A smaller character CNN (1024 filters, 1 highway layer), in proportion to the encoder.
  char_cnn_filters: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512]],
  char_cnn_highway_layers: 1,
  // Read only by the Table 3 rows.
  elmo_archive: std.extVar('ELMOC_ELMO_ARCHIVE'),
})
