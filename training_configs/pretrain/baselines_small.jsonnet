// Every baseline of baselines.libsonnet (the rows of Li et al. 2019, Tables 1 and 4) at the
// quickstart's scale: the sizes, schedule and 100-d corpus-trained fastText of elmoc_small.jsonnet,
// for the PTB text of `make demo`. ELMOC_BASELINE picks the variant: elmo,
// elmo_a, elmo_sub, elmoc_oneb, elmoc_rnd, elmoc_cnn, elmoc_cnn_cnn, sampled, fixed or full.
// PTB's vocabulary has 10,000 words, so the closed vocabularies are uncapped, the adaptive
// softmax uses cutoffs [2000, 6000], the sampled softmax 4096 samples and ELMo-Sub 8,000 pieces.
//
//   ELMOC_BASELINE=elmo_a ELMOC_FASTTEXT=quickstart_output/ptb.bin \
//   ELMOC_TRAIN_DATA=quickstart_output/data/ptb.train.txt ELMOC_VALIDATION_DATA=quickstart_output/data/ptb.valid.txt \
//   allennlp train training_configs/pretrain/baselines_small.jsonnet -s runs/small_elmo_a --include-package elmoc_allennlp
local baselines = import 'baselines.libsonnet';
// The quickstart model's sizes and schedule, read from its config so the two stay in sync.
local small = import 'elmoc_small.jsonnet';
local schedule = small.trainer.learning_rate_scheduler;

baselines.variant(std.extVar('ELMOC_BASELINE'), {
  fasttext_path: std.extVar('ELMOC_FASTTEXT'),
  embedding_dim: small.model.output_layer.embedding_dim,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  validation_data_path: std.extVar('ELMOC_VALIDATION_DATA'),
  projection_dim: small.model.contextualizer.projection_dim,
  cell_dim: small.model.contextualizer.cell_dim,
  batch_size: small.data_loader.batch_sampler.batch_size,
  num_epochs: small.trainer.num_epochs,
  max_sequence_length: small.dataset_reader.max_sequence_length,
  learning_rate: small.trainer.optimizer.lr,
  warmup_steps: schedule.warmup_steps,
  decay_start: schedule.decay_start,
  decay_end: schedule.decay_end,
  num_replicas: schedule.num_replicas,
  // PTB-sized closed vocabularies and baselines.
  vocabulary_size: null,
  num_samples: 4096,
  cutoffs: [2000, 6000],
  div_value: 4.0,
  bpe_vocab_size: 8000,
  // A smaller character CNN (1024 filters, 1 highway layer), in proportion to the encoder.
  char_cnn_filters: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512]],
  char_cnn_highway_layers: 1,
})
