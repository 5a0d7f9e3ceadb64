// SNLI with ESIM + ELMo-C.
// Paper (Li, Chen, Hsieh & Chang, TACL 2019, Table 2): ELMo-C SNLI test accuracy 88.8.
//
// allennlp-models' training_config/pair_classification/esim_elmo.jsonnet (ESIM, Chen et al. 2017,
// with one ELMo representation at the input and no GloVe, as in Peters et al. 2018), hyperparameters
// unchanged, with the two ELMo blocks replaced by ELMo-C:
//   "elmo": {"type": "elmo_characters"}                -> {"type": "elmoc_bilm_inputs", ...}
//   "elmo": {"type": "elmo_token_embedder", ...}       -> {"type": "elmoc_token_embedder", ...}
// and whitespace tokenization instead of spaCy (spaCy models cannot be downloaded here).
// ELMOC_DIM is the biLM's 2 * projection_dim: 1024 at the paper's size, which keeps ESIM's encoder
// input size of the ELMo recipe.
//
//   ELMOC_ARCHIVE=runs/elmoc/model.tar.gz ELMOC_DIM=1024 \
//   SNLI_TRAIN_DATA_PATH=snli_1.0_train.jsonl SNLI_VALIDATION_DATA_PATH=snli_1.0_dev.jsonl \
//   SNLI_TEST_DATA_PATH=snli_1.0_test.jsonl \
//   allennlp train training_configs/downstream/snli_esim.jsonnet -s runs/snli_esim --include-package elmoc_allennlp
local elmoc_archive = std.extVar('ELMOC_ARCHIVE');
local elmoc_dim = std.parseInt(std.extVar('ELMOC_DIM'));

{
  dataset_reader: {
    type: 'snli',
    tokenizer: { type: 'whitespace' },
    token_indexers: {
      elmo: { type: 'elmoc_bilm_inputs', archive_file: elmoc_archive },
    },
  },
  train_data_path: std.extVar('SNLI_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('SNLI_VALIDATION_DATA_PATH'),
  test_data_path: std.extVar('SNLI_TEST_DATA_PATH'),
  evaluate_on_test: true,
  model: {
    type: 'esim',
    dropout: 0.5,
    text_field_embedder: {
      token_embedders: {
        elmo: {
          type: 'elmoc_token_embedder',
          archive_file: elmoc_archive,
          bilm_dim: elmoc_dim,  // a wrong ELMOC_DIM is an error naming it
          do_layer_norm: false,
          dropout: 0.0,
        },
      },
    },
    encoder: {
      type: 'lstm',
      input_size: elmoc_dim,
      hidden_size: 300,
      num_layers: 1,
      bidirectional: true,
    },
    matrix_attention: { type: 'dot_product' },
    projection_feedforward: {
      input_dim: 2400,
      hidden_dims: 300,
      num_layers: 1,
      activations: 'relu',
    },
    inference_encoder: {
      type: 'lstm',
      input_size: 300,
      hidden_size: 300,
      num_layers: 1,
      bidirectional: true,
    },
    output_feedforward: {
      input_dim: 2400,
      num_layers: 1,
      hidden_dims: 300,
      activations: 'relu',
      dropout: 0.5,
    },
    output_logit: {
      input_dim: 300,
      num_layers: 1,
      hidden_dims: 3,
      activations: 'linear',
    },
    initializer: {
      regexes: [
        ['.*linear_layers.*weight', { type: 'xavier_uniform' }],
        ['.*linear_layers.*bias', { type: 'zero' }],
        ['.*weight_ih.*', { type: 'xavier_uniform' }],
        ['.*weight_hh.*', { type: 'orthogonal' }],
        ['.*bias_ih.*', { type: 'zero' }],
        ['.*bias_hh.*', { type: 'lstm_hidden_bias' }],
      ],
    },
  },
  data_loader: {
    batch_sampler: { type: 'bucket', batch_size: 32 },
  },
  trainer: {
    // allennlp's gradient_descent; a misspelt key (e.g. trainer.num_epoch) is an error, not ignored.
    type: 'elmoc_checked_gradient_descent',
    optimizer: { type: 'adam', lr: 0.0004 },
    checkpointer: { keep_most_recent_by_count: 2 },
    validation_metric: '+accuracy',
    num_epochs: 75,
    grad_norm: 10.0,
    patience: 5,
    learning_rate_scheduler: { type: 'reduce_on_plateau', factor: 0.5, mode: 'max', patience: 0 },
  },
}
