// Coreference resolution (CoNLL-2012) with Lee et al. (2018)'s coarse-to-fine model + ELMo-C.
// Paper (Li, Chen, Hsieh & Chang, TACL 2019, Table 2): ELMo-C coref test F1 (avg. of MUC, B3,
// CEAF-phi4) 72.9.
//
// allennlp-models' `coref` model, configured as Lee, He & Zettlemoyer (2018), "Higher-order
// Coreference Resolution with Coarse-to-fine Inference" (their released "best" configuration:
// word vectors + character CNN + ELMo, 3-layer 200-d BiLSTM, spans up to 30 words, 0.4 spans per
// word, 50 antecedents, coarse-to-fine pruning, second-order inference, 150-d FFNNs, 20-d features,
// lexical dropout 0.5, FFNN dropout 0.2, at most 50 sentences per training document, Adam 1e-3,
// gradient norm 5), written in the layout of allennlp-models' training_config/coref/coref.jsonnet
// (whose initializers, character CNN and trainer it keeps), with ELMo-C where Lee et al. use ELMo.
// Differences: the 300-d GloVe vectors -> the frozen fastText vectors (ELMOC_FASTTEXT,
// ELMOC_FASTTEXT_DIM), since GloVe cannot be downloaded here; allennlp's `lstm` has no highway
// connections between layers; `coref` embeds a document as one sequence, so ELMo-C runs over the
// whole document (Lee et al. run ELMo per sentence).
//
//   ELMOC_ARCHIVE=runs/elmoc/model.tar.gz ELMOC_DIM=1024 \
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_FASTTEXT_DIM=300 \
//   COREF_TRAIN_DATA_PATH=train.english.v4_gold_conll COREF_VALIDATION_DATA_PATH=dev.english.v4_gold_conll \
//   COREF_TEST_DATA_PATH=test.english.v4_gold_conll \
//   allennlp train training_configs/downstream/coref.jsonnet -s runs/coref --include-package elmoc_allennlp
local elmoc_archive = std.extVar('ELMOC_ARCHIVE');
local elmoc_dim = std.parseInt(std.extVar('ELMOC_DIM'));
local fasttext = std.extVar('ELMOC_FASTTEXT');
local fasttext_dim = std.parseInt(std.extVar('ELMOC_FASTTEXT_DIM'));

local char_cnn_dim = 100;
local text_dim = fasttext_dim + char_cnn_dim + elmoc_dim;
local lstm_dim = 200;
local feature_size = 20;
local max_span_width = 30;
// Endpoints of the contextualized span (2 x 2 * lstm_dim), width feature, attended text embedding.
local span_embedding_dim = 4 * lstm_dim + feature_size + text_dim;
local span_pair_embedding_dim = 3 * span_embedding_dim + feature_size;

local reader(max_sentences) = {
  type: 'coref',
  token_indexers: {
    tokens: { type: 'elmoc_fasttext_subwords', vectors_path: fasttext },
    token_characters: { type: 'characters', min_padding_length: 5 },
    elmo: { type: 'elmoc_bilm_inputs', archive_file: elmoc_archive },
  },
  max_span_width: max_span_width,
  [if max_sentences != null then 'max_sentences']: max_sentences,
};

{
  dataset_reader: reader(50),
  validation_dataset_reader: reader(null),
  train_data_path: std.extVar('COREF_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('COREF_VALIDATION_DATA_PATH'),
  test_data_path: std.extVar('COREF_TEST_DATA_PATH'),
  evaluate_on_test: true,
  model: {
    type: 'coref',
    text_field_embedder: {
      token_embedders: {
        tokens: {
          type: 'elmoc_fasttext', vectors_path: fasttext, embedding_dim: fasttext_dim,
        },
        token_characters: {
          type: 'character_encoding',
          embedding: { embedding_dim: 16, vocab_namespace: 'token_characters' },
          encoder: {
            type: 'cnn',
            embedding_dim: 16,
            num_filters: char_cnn_dim,
            ngram_filter_sizes: [5],
          },
        },
        elmo: {
          type: 'elmoc_token_embedder',
          archive_file: elmoc_archive,
          bilm_dim: elmoc_dim,  // a wrong ELMOC_DIM is an error naming it
          do_layer_norm: false,
          dropout: 0.0,
        },
      },
    },
    context_layer: {
      type: 'lstm',
      bidirectional: true,
      input_size: text_dim,
      hidden_size: lstm_dim,
      num_layers: 3,
      dropout: 0.4,
    },
    mention_feedforward: {
      input_dim: span_embedding_dim,
      num_layers: 2,
      hidden_dims: 150,
      activations: 'relu',
      dropout: 0.2,
    },
    antecedent_feedforward: {
      input_dim: span_pair_embedding_dim,
      num_layers: 2,
      hidden_dims: 150,
      activations: 'relu',
      dropout: 0.2,
    },
    initializer: {
      regexes: [
        ['.*linear_layers.*weight', { type: 'xavier_normal' }],
        ['.*scorer._module.weight', { type: 'xavier_normal' }],
        ['_distance_embedding.weight', { type: 'xavier_normal' }],
        ['_span_width_embedding.weight', { type: 'xavier_normal' }],
        ['_context_layer._module.weight_ih.*', { type: 'xavier_normal' }],
        ['_context_layer._module.weight_hh.*', { type: 'orthogonal' }],
      ],
    },
    lexical_dropout: 0.5,
    feature_size: feature_size,
    max_span_width: max_span_width,
    spans_per_word: 0.4,
    max_antecedents: 50,
    coarse_to_fine: true,
    inference_order: 2,
  },
  data_loader: {
    batch_sampler: { type: 'bucket', sorting_keys: ['text'], padding_noise: 0.0, batch_size: 1 },
  },
  trainer: {
    // allennlp's gradient_descent; a misspelt key (e.g. trainer.num_epoch) is an error, not ignored.
    type: 'elmoc_checked_gradient_descent',
    num_epochs: 150,
    grad_norm: 5.0,
    patience: 10,
    validation_metric: '+coref_f1',
    learning_rate_scheduler: { type: 'reduce_on_plateau', factor: 0.5, mode: 'max', patience: 2 },
    optimizer: { type: 'adam', lr: 0.001 },
  },
}
