// Semantic role labeling (CoNLL-2012) with He et al. (2017)'s deep BiLSTM + ELMo-C.
// Paper (Li, Chen, Hsieh & Chang, TACL 2019, Table 2): ELMo-C SRL test F1 82.4.
//
// allennlp-models' training_config/structured_prediction/srl_elmo.jsonnet (He et al. 2017's
// 8-layer alternating highway BiLSTM, with ELMo as the word representation, Peters et al. 2018),
// hyperparameters unchanged, including ELMo dropout 0.1 and the L2 penalty 0.001 on the mixing
// weights, with the two ELMo blocks replaced by ELMo-C. ELMOC_DIM is the biLM's 2 *
// projection_dim (1024 at the paper's size, which keeps the recipe's encoder input of 1124).
// The data is the CoNLL-2012 (OntoNotes 5.0) `conll-formatted-ontonotes-5.0` directories;
// the SRL span F1 uses the official srl-eval.pl (needs perl).
//
//   ELMOC_ARCHIVE=runs/elmoc/model.tar.gz ELMOC_DIM=1024 \
//   SRL_TRAIN_DATA_PATH=conll-2012/v4/data/train SRL_VALIDATION_DATA_PATH=conll-2012/v4/data/development \
//   SRL_TEST_DATA_PATH=conll-2012/v4/data/test \
//   allennlp train training_configs/downstream/srl.jsonnet -s runs/srl --include-package elmoc_allennlp
local elmoc_archive = std.extVar('ELMOC_ARCHIVE');
local elmoc_dim = std.parseInt(std.extVar('ELMOC_DIM'));
local binary_feature_dim = 100;

{
  dataset_reader: {
    type: 'srl',
    token_indexers: {
      elmo: { type: 'elmoc_bilm_inputs', archive_file: elmoc_archive },
    },
  },
  train_data_path: std.extVar('SRL_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('SRL_VALIDATION_DATA_PATH'),
  test_data_path: std.extVar('SRL_TEST_DATA_PATH'),
  evaluate_on_test: true,
  model: {
    type: 'srl',
    text_field_embedder: {
      token_embedders: {
        elmo: {
          type: 'elmoc_token_embedder',
          archive_file: elmoc_archive,
          bilm_dim: elmoc_dim,  // a wrong ELMOC_DIM is an error naming it
          do_layer_norm: false,
          dropout: 0.1,
        },
      },
    },
    initializer: {
      regexes: [['tag_projection_layer.*weight', { type: 'orthogonal' }]],
    },
    encoder: {
      type: 'alternating_lstm',
      input_size: elmoc_dim + binary_feature_dim,
      hidden_size: 300,
      num_layers: 8,
      recurrent_dropout_probability: 0.1,
      use_input_projection_bias: false,
    },
    binary_feature_dim: binary_feature_dim,
    regularizer: {
      regexes: [['.*scalar_parameters.*', { type: 'l2', alpha: 0.001 }]],
    },
  },
  data_loader: {
    batch_sampler: { type: 'bucket', batch_size: 80 },
  },
  trainer: {
    // allennlp's gradient_descent; a misspelt key (e.g. trainer.num_epoch) is an error, not ignored.
    type: 'elmoc_checked_gradient_descent',
    num_epochs: 500,
    grad_clipping: 1.0,
    patience: 200,
    validation_metric: '+f1-measure-overall',
    checkpointer: { keep_most_recent_by_count: 10 },
    optimizer: { type: 'adadelta', rho: 0.95 },
  },
}
