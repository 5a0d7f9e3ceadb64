// CoNLL-2003 NER with a CRF tagger + ELMo-C.
// Paper (Li, Chen, Hsieh & Chang, TACL 2019, Table 2): ELMo-C NER test F1 92.24.
//
// allennlp-models' training_config/tagging/ner_elmo.jsonnet (Peters et al. 2018's NER model:
// word vectors + character CNN + ELMo, 2-layer BiLSTM, CRF), hyperparameters unchanged, including
// the L2 penalty 0.1 on the ELMo mixing weights (`scalar_parameters`), with three changes:
// * the two ELMo blocks replaced by ELMo-C (`elmoc_bilm_inputs` / `elmoc_token_embedder`);
// * the 50-d GloVe vectors (lowercased, fine-tuned) -> frozen fastText vectors (ELMOC_FASTTEXT,
//   ELMOC_FASTTEXT_DIM): GloVe cannot be downloaded here, and fine-tuning the whole fastText table
//   (words + 2M n-gram buckets) is not practical. Tokens are lowercased when the fastText model
//   was trained on lowercased text (the PTB quickstart's) and keep their case otherwise (the log
//   says which; `lowercase_tokens` forces it: training_configs/downstream/README.md#casing);
// * model selection on the development set (eng.testa) and a final evaluation on eng.testb; the
//   recipe validates on eng.testb.
//
//   ELMOC_ARCHIVE=runs/elmoc/model.tar.gz ELMOC_DIM=1024 \
//   ELMOC_FASTTEXT=crawl-300d-2M-subword.bin ELMOC_FASTTEXT_DIM=300 \
//   NER_TRAIN_DATA_PATH=conll2003/eng.train NER_VALIDATION_DATA_PATH=conll2003/eng.testa \
//   NER_TEST_DATA_PATH=conll2003/eng.testb \
//   allennlp train training_configs/downstream/ner_crf_tagger.jsonnet -s runs/ner --include-package elmoc_allennlp
// ELMOC_ARCHIVE='' (ELMOC_DIM ignored) is the fastText + character CNN baseline without a biLM.
local elmoc_archive = std.extVar('ELMOC_ARCHIVE');
local use_bilm = elmoc_archive != '';
local elmoc_dim = if use_bilm then std.parseInt(std.extVar('ELMOC_DIM')) else 0;
local fasttext = std.extVar('ELMOC_FASTTEXT');
local fasttext_dim = std.parseInt(std.extVar('ELMOC_FASTTEXT_DIM'));
local char_cnn_dim = 128;

{
  dataset_reader: {
    type: 'conll2003',
    tag_label: 'ner',
    coding_scheme: 'BIOUL',
    token_indexers: {
      tokens: { type: 'elmoc_fasttext_subwords', vectors_path: fasttext },
      token_characters: { type: 'characters', min_padding_length: 3 },
      [if use_bilm then 'elmo']: { type: 'elmoc_bilm_inputs', archive_file: elmoc_archive },
    },
  },
  train_data_path: std.extVar('NER_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('NER_VALIDATION_DATA_PATH'),
  test_data_path: std.extVar('NER_TEST_DATA_PATH'),
  evaluate_on_test: true,
  model: {
    type: 'crf_tagger',
    label_encoding: 'BIOUL',
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
        token_characters: {
          type: 'character_encoding',
          // The recipe sizes this from the default 'tokens' namespace (GloVe's words); with vocabulary-free
          // fastText that namespace is empty, so the character namespace is named.
          embedding: { embedding_dim: 16, vocab_namespace: 'token_characters' },
          encoder: {
            type: 'cnn',
            embedding_dim: 16,
            num_filters: char_cnn_dim,
            ngram_filter_sizes: [3],
            conv_layer_activation: 'relu',
          },
        },
      },
    },
    encoder: {
      type: 'lstm',
      input_size: fasttext_dim + char_cnn_dim + elmoc_dim,
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
    // allennlp's gradient_descent; a misspelt key (e.g. trainer.num_epoch) is an error, not ignored.
    type: 'elmoc_checked_gradient_descent',
    optimizer: { type: 'adam', lr: 0.001 },
    checkpointer: { keep_most_recent_by_count: 3 },
    validation_metric: '+f1-measure-overall',
    num_epochs: 75,
    grad_norm: 5.0,
    patience: 25,
  },
}
