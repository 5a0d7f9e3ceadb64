// Universal Dependencies part-of-speech tagging (UPOS, e.g. UD English-EWT) with a BiLSTM-CRF
// tagger + ELMo-C (or any biLM archive of training_configs/pretrain/). Not a task of Li et al.
// (TACL 2019); ours, added for the ELMo / ELMo-C comparison: the NER model of
// ner_crf_tagger.jsonnet (frozen fastText + biLM mix with the L2 penalty 0.1 on its weights,
// 2-layer BiLSTM, CRF, Adam 1e-3) without the character CNN (fastText's subwords already see
// the characters) and without a label encoding (UPOS tags are not spans).
// ELMOC_ARCHIVE='' (ELMOC_DIM ignored) is the fastText-only baseline.
//
//   ELMOC_ARCHIVE=runs/elmoc/model.tar.gz ELMOC_DIM=1024 \
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_FASTTEXT_DIM=300 \
//   POS_TRAIN_DATA_PATH=ud_ewt/en_ewt-ud-train.conllu POS_VALIDATION_DATA_PATH=ud_ewt/en_ewt-ud-dev.conllu \
//   POS_TEST_DATA_PATH=ud_ewt/en_ewt-ud-test.conllu \
//   allennlp train examples/equal_compute_study/ud_pos_tagger.jsonnet -s runs/pos \
//     --include-package elmoc_allennlp --include-package examples.equal_compute_study
local elmoc_archive = std.extVar('ELMOC_ARCHIVE');
local use_bilm = elmoc_archive != '';
local elmoc_dim = if use_bilm then std.parseInt(std.extVar('ELMOC_DIM')) else 0;
local fasttext = std.extVar('ELMOC_FASTTEXT');
local fasttext_dim = std.parseInt(std.extVar('ELMOC_FASTTEXT_DIM'));

{
  dataset_reader: {
    type: 'elmoc_ud_pos',
    token_indexers: {
      tokens: { type: 'elmoc_fasttext_subwords', vectors_path: fasttext },
      [if use_bilm then 'elmo']: { type: 'elmoc_bilm_inputs', archive_file: elmoc_archive },
    },
  },
  train_data_path: std.extVar('POS_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('POS_VALIDATION_DATA_PATH'),
  test_data_path: std.extVar('POS_TEST_DATA_PATH'),
  evaluate_on_test: true,
  model: {
    type: 'crf_tagger',
    dropout: 0.5,
    include_start_end_transitions: false,
    text_field_embedder: {
      token_embedders: {
        tokens: {
          type: 'elmoc_fasttext', vectors_path: fasttext, embedding_dim: fasttext_dim,
        },
        [if use_bilm then 'elmo']: {
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
      input_size: fasttext_dim + elmoc_dim,
      hidden_size: 200,
      num_layers: 2,
      dropout: 0.5,
      bidirectional: true,
    },
    [if use_bilm then 'regularizer']: {
      regexes: [['scalar_parameters', { type: 'l2', alpha: 0.1 }]],
    },
  },
  data_loader: { batch_size: 64 },
  trainer: {
    optimizer: { type: 'adam', lr: 0.001 },
    checkpointer: { keep_most_recent_by_count: 1 },
    validation_metric: '+accuracy',
    num_epochs: 40,
    grad_norm: 5.0,
    patience: 10,
  },
}
