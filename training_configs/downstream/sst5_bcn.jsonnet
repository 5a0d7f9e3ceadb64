// SST-5 (fine-grained sentiment) with the biattentive classification network (BCN) + ELMo-C.
// Paper (Li, Chen, Hsieh & Chang, TACL 2019, Table 2): ELMo-C SST-5 test accuracy 53.80.
//
// allennlp-models' training_config/classification/biattentive_classification_network_elmo.jsonnet
// (BCN, McCann et al. 2017, with ELMo at the input, Peters et al. 2018), hyperparameters unchanged,
// with three changes:
// * ELMo -> ELMo-C. `bcn` takes ELMo through its own `elmo` argument (an allennlp `Elmo`, which a
//   config can only build from ELMo's options/weights files). The recipe uses ELMo at the input
//   only (`use_input_elmo: true`, one output representation, dropout 0), where BCN concatenates it
//   to the word vectors before `embedding_dropout`: exactly what the text field embedder does with
//   a second token embedder. So ELMo-C is the `elmoc` token embedder here and `bcn` is used
//   unmodified (the key must not be "elmo", which `bcn` reserves for its own argument). For ELMo at
//   the integrator output as well, pass `ElmocElmo(archive, num_output_representations=2)` as
//   `elmo` from Python (see training_configs/downstream/README.md).
// * The 300-d GloVe 840B word vectors (frozen) -> the frozen fastText vectors (ELMOC_FASTTEXT,
//   ELMOC_FASTTEXT_DIM; the biLM's own, e.g. crawl-300d-2M-subword.bin), vocabulary-free:
//   GloVe cannot be downloaded here.
// * Data paths from the environment (the PTB-tree files of the SST: train.txt, dev.txt, test.txt).
//
//   ELMOC_ARCHIVE=runs/elmoc/model.tar.gz ELMOC_DIM=1024 \
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_FASTTEXT_DIM=300 \
//   SST_TRAIN_DATA_PATH=sst/train.txt SST_VALIDATION_DATA_PATH=sst/dev.txt SST_TEST_DATA_PATH=sst/test.txt \
//   allennlp train training_configs/downstream/sst5_bcn.jsonnet -s runs/sst5_bcn --include-package elmoc_allennlp
// ELMOC_ARCHIVE='' (ELMOC_DIM ignored) is the fastText-only baseline without a biLM.
local elmoc_archive = std.extVar('ELMOC_ARCHIVE');
local use_bilm = elmoc_archive != '';
local elmoc_dim = if use_bilm then std.parseInt(std.extVar('ELMOC_DIM')) else 0;
local fasttext = std.extVar('ELMOC_FASTTEXT');
local fasttext_dim = std.parseInt(std.extVar('ELMOC_FASTTEXT_DIM'));

local reader(use_subtrees) = {
  type: 'sst_tokens',
  use_subtrees: use_subtrees,
  granularity: '5-class',
  token_indexers: {
    tokens: { type: 'elmoc_fasttext_subwords', vectors_path: fasttext },
    [if use_bilm then 'elmoc']: { type: 'elmoc_bilm_inputs', archive_file: elmoc_archive },
  },
};

{
  dataset_reader: reader(true),
  validation_dataset_reader: reader(false),
  train_data_path: std.extVar('SST_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('SST_VALIDATION_DATA_PATH'),
  test_data_path: std.extVar('SST_TEST_DATA_PATH'),
  evaluate_on_test: true,
  model: {
    type: 'bcn',
    text_field_embedder: {
      token_embedders: {
        tokens: {
          type: 'elmoc_fasttext', vectors_path: fasttext, embedding_dim: fasttext_dim,
        },
        [if use_bilm then 'elmoc']: {
          type: 'elmoc_token_embedder',
          archive_file: elmoc_archive,
          bilm_dim: elmoc_dim,  // a wrong ELMOC_DIM is an error naming it
          do_layer_norm: false,
          dropout: 0.0,
        },
      },
    },
    embedding_dropout: 0.5,
    pre_encode_feedforward: {
      input_dim: fasttext_dim + elmoc_dim,
      num_layers: 1,
      hidden_dims: [300],
      activations: ['relu'],
      dropout: [0.25],
    },
    encoder: {
      type: 'lstm',
      input_size: 300,
      hidden_size: 300,
      num_layers: 1,
      bidirectional: true,
    },
    integrator: {
      type: 'lstm',
      input_size: 1800,
      hidden_size: 300,
      num_layers: 1,
      bidirectional: true,
    },
    integrator_dropout: 0.1,
    output_layer: {
      input_dim: 2400,
      num_layers: 3,
      output_dims: [1200, 600, 5],
      pool_sizes: 4,
      dropout: [0.2, 0.3, 0.0],
    },
  },
  data_loader: {
    batch_sampler: { type: 'bucket', batch_size: 100 },
  },
  trainer: {
    // allennlp's gradient_descent; a misspelt key (e.g. trainer.num_epoch) is an error, not ignored.
    type: 'elmoc_checked_gradient_descent',
    num_epochs: 40,
    patience: 5,
    grad_norm: 5.0,
    validation_metric: '+accuracy',
    optimizer: { type: 'adam', lr: 0.001 },
  },
}
