// The output- and input-layer baselines of Li, Chen, Hsieh, Chang, "Efficient Contextual
// Representation Learning With Continuous Outputs" (TACL 2019), Tables 1 and 4, built on the
// ELMo-C config (`elmoc.libsonnet`): same reader, encoder, optimizer and schedule; only the
// input layer, the output layer and (for closed vocabularies) the vocabulary change.
//
// `baselines.variant(name, settings)` takes the settings of `elmoc.config` plus those below
// (an unknown setting is an error naming it and the setting it probably meant):
//
//   name           paper row                                 input            output
//   elmo           ELMo (Table 1)                            char CNN         sampled softmax
//   elmo_a         ELMo-A (Table 1; "Adaptive" in Table 4)   fastText         adaptive softmax
//   elmo_sub       ELMo-Sub (Table 1; "Subword" in Table 4)  BPE lookup       full softmax, tied
//   elmoc_oneb     ELMo-C_OneB (Table 1)                     fastText trained on the LM corpus
//   elmoc_rnd      ELMo-C_Rnd (Table 1)                      fastText         continuous, N(0,1) targets
//   elmoc_cnn_cc   Table 3, CNN-CC                           ELMo's CNN       continuous, fastText targets
//   elmoc_cc_cnn   Table 3, CC-CNN                           fastText         continuous, ELMo's CNN targets
//   elmoc_cnn_cnn  Table 3, CNN-CNN                          ELMo's CNN       continuous, ELMo's CNN targets
//   sampled        "Sampled" (Table 4)                       fastText         sampled softmax
//   fixed          "Fixed" (Table 4, section 5.2)            fastText         sampled softmax, frozen
//                                                                             fastText output embedding
//   full           full softmax (not in the paper's tables)  fastText         full softmax
//
// The Table 3 rows use the character CNN of a trained ELMo, frozen, as the paper does (and the
// authors' code: input_layer.name "cnn" loads ELMo's weight file, input_layer.freeze true):
// `elmo_archive` is the model.tar.gz of an `elmo` run (elmo.jsonnet, or baselines_small.jsonnet
// with ELMOC_BASELINE=elmo), and the char_cnn_* settings must be that run's. Its CNN is copied in
// by allennlp's `pretrained` initializer and frozen with an optimizer parameter group
// `{"requires_grad": false}`.
//
// The closed vocabularies (every output but the continuous one) are built from the training
// corpus by frequency, capped at `vocabulary_size` words (allennlp's `from_instances`
// vocabulary sorts by count, which the sampled and adaptive softmax need); words outside it are
// @@UNKNOWN@@, a target like any other. `python -m benchmarks.vocabulary_coverage` reports the
// out-of-vocabulary rate of a cap on a corpus. On the One Billion Word corpus, run
// `allennlp build-vocab` once and point `vocabulary` at the result (type `from_files`) to avoid
// a counting pass per run.
local elmoc = import 'elmoc.libsonnet';
local checks = import 'settings.libsonnet';

// ELMo's character CNN (Peters et al. 2018): 16-d character embeddings, 2048 filters of widths
// 1-7, 2 highway layers, projected to the LSTM size. allennlp's `cnn-highway` encoder.
local elmo_filters = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]];

local defaults = {
  // Closed vocabulary cap: ELMo's One Billion Word vocabulary has 793,471 words (Table 4's
  // "800K"); Table 4 also uses 40K and 2,000K.
  vocabulary_size: 793471,
  // Sampled softmax: ELMo's 8192 log-uniform negatives.
  num_samples: 8192,
  // Sparse gradients for the sampled softmax's output rows (as ELMo's TensorFlow code), with the
  // `dense_sparse_adam` optimizer. Off by default: allennlp 2.10's trainer clips gradients with
  // torch's clip_grad_norm_, which rejects sparse gradients, so turning it on also turns off
  // gradient-norm clipping.
  sparse_softmax: false,
  // Adaptive softmax (torch.nn.AdaptiveLogSoftmaxWithLoss). With a 512-d LSTM output these
  // cutoffs give the paper's Table 4 sizes (encoder 75.72M + output layer):
  //   40K:    cutoffs [10000, 20000, 30000], div_value 1  -> 96.99M (paper 97M)
  //   800K:   cutoffs [100000, 600000, 740000], div_value 4 -> 195.92M (paper 196M)
  //   2,000K: cutoffs [100000, 400000, 1850000], div_value 4 -> 213.01M (paper 213M)
  // (At 40K the paper's adaptive layer is larger than the 40K sampled softmax, 96M: only
  // full-width tail clusters, div_value 1, reproduce that.)
  cutoffs: [100000, 600000, 740000],
  div_value: 4.0,
  // ELMo-Sub: "~30K" BPE pieces (SentencePiece, trained on the training corpus on first use);
  // 32,000 pieces with a 512-d tied embedding give the paper's 92M.
  bpe_vocab_size: 32000,
  bpe_training_sentences: 2000000,
  // Char CNN: trained jointly with the encoder in `elmo`, projected to this size (for the Table 3
  // rows: the settings of the elmo run given as elmo_archive).
  char_cnn_filters: elmo_filters,
  char_cnn_highway_layers: 2,
  char_cnn_dim: null,  // default: projection_dim
  // ELMo's LSTM has no LayerNorm; set true for an ELMo-C-style encoder under the char CNN.
  elmo_layer_norm: false,
  // ELMo-C_Rnd: the cap of the random target vectors' vocabulary (null: every word of the
  // corpus gets its own vector).
  random_vocabulary_size: null,
  // Table 3 rows: the model.tar.gz of a trained `elmo` run, whose character CNN they use.
  elmo_archive: null,
};

local elmo_cnn_key = 'elmo_characters';

local single_id(namespace) = { type: 'single_id', namespace: namespace };

local closed_vocabulary(size) = {
  type: 'from_instances',
  [if size != null then 'max_vocab_size']: { targets: size },
};

local char_cnn(s, dim) = {
  type: 'character_encoding',
  embedding: { num_embeddings: 262, embedding_dim: 16 },
  encoder: {
    type: 'cnn-highway',
    embedding_dim: 16,
    filters: s.char_cnn_filters,
    num_highway: s.char_cnn_highway_layers,
    projection_dim: dim,
    activation: 'relu',
  },
};

// The names of the character CNN's parameters (allennlp's `character_encoding` +
// `cnn-highway`), relative to its token embedder.
local char_cnn_parameters(s) =
  ['_embedding._module.weight']
  + [
    '_encoder._module.char_conv_%d.%s' % [i, kind]
    for i in std.range(0, std.length(s.char_cnn_filters) - 1)
    for kind in ['weight', 'bias']
  ]
  + [
    '_encoder._module._highways._layers.%d.%s' % [k, kind]
    for k in std.range(0, s.char_cnn_highway_layers - 1)
    for kind in ['weight', 'bias']
  ]
  + ['_encoder._module._projection.weight', '_encoder._module._projection.bias'];

// The trained ELMo's CNN, frozen, as the `elmo_characters` embedder of `embedder` (the model's
// `_text_field_embedder` or `_target_embedder`).
local pretrained_cnn(s, embedders) =
  local archive = if s.elmo_archive != null then s.elmo_archive
  else error 'elmo_archive (the model.tar.gz of a trained elmo run) is required for the Table 3 rows';
  local source = '_text_field_embedder.token_embedder_%s.' % elmo_cnn_key;
  {
    model+: {
      initializer: {
        regexes: [
          [
            std.join('|', ['^' + std.strReplace(embedder, '.', '\\.') + '\\.token_embedder_' + elmo_cnn_key + '\\.' for embedder in embedders]),
            {
              type: 'pretrained',
              weights_file_path: archive,
              parameter_name_overrides: {
                ['%s.token_embedder_%s.%s' % [embedder, elmo_cnn_key, name]]: source + name
                for embedder in embedders
                if embedder != '_text_field_embedder'
                for name in char_cnn_parameters(s)
              },
            },
          ],
        ],
      },
    },
    trainer+: {
      optimizer+: {
        parameter_groups: [
          [['^' + std.strReplace(embedder, '.', '\\.') + '\\.token_embedder_' + elmo_cnn_key + '\\.' for embedder in embedders], { requires_grad: false }],
        ],
      },
    },
  };

// Inputs that already have the LSTM's size (char CNN, BPE lookup): the authors' LSTM has no
// input projection then (source/models/custom_elmo_lstm.py builds `input_projection` only when
// input_size != hidden_size); ours keeps one, shared by both directions, to stay closest to their
// parameter counts (e.g. ELMo-Sub's 92M, Table 4).
local p_dimensional_input(dim) = { input_dim: dim, separate_input_projections: false };

// fastText input, a closed-vocabulary output layer, shared by both directions as in ELMo
// (Peters et al. 2018, section 3.1: the softmax is tied between the directions).
local softmax_family(s, base, output_layer) = base {
  dataset_reader+: { token_indexers+: { targets: single_id('targets') } },
  vocabulary: closed_vocabulary(s.vocabulary_size),
  model+: { output_layer: output_layer, target_indexer: 'targets', backward_output_layer:: null },
};

local sampled_layer(s, P) = {
  type: 'elmoc_sampled_softmax',
  input_dim: P,
  num_samples: s.num_samples,
  sparse: s.sparse_softmax,
};

// Sparse gradients (output rows) need allennlp's dense/sparse Adam, and no norm clipping.
local sparse_optimizer(s) =
  if s.sparse_softmax then {
    trainer+: { optimizer+: { type: 'dense_sparse_adam' }, grad_norm: false },
  } else {};

{
  defaults:: defaults,

  variant(name, settings)::
    local s = defaults + settings;
    local base = elmoc.config(s, std.objectFields(defaults));
    // The LSTM state size and the char CNN's output size, as the ELMo-C config sets them.
    local P = base.model.contextualizer.projection_dim;
    local cnn_dim = if s.char_cnn_dim != null then s.char_cnn_dim else P;
    local variants = {
      sampled: softmax_family(s, base, sampled_layer(s, P)) + sparse_optimizer(s),

      fixed: softmax_family(s, base, sampled_layer(s, P) {
        pretrained_file: s.fasttext_path,
        trainable_embedding: false,
      }) + sparse_optimizer(s),

      full: softmax_family(s, base, { type: 'elmoc_softmax', input_dim: P }),

      elmo_a: softmax_family(s, base, {
        type: 'elmoc_adaptive_softmax',
        input_dim: P,
        cutoffs: s.cutoffs,
        div_value: s.div_value,
      }),

      elmo: base {
        dataset_reader+: {
          token_indexers: { elmo_characters: { type: 'elmo_characters' }, targets: single_id('targets') },
        },
        vocabulary: closed_vocabulary(s.vocabulary_size),
        model+: {
          text_field_embedder: { token_embedders: { elmo_characters: char_cnn(s, cnn_dim) } },
          contextualizer+: p_dimensional_input(cnn_dim) { layer_norm: s.elmo_layer_norm },
          output_layer: sampled_layer(s, P),
          backward_output_layer:: null,
          target_indexer: 'targets',
        },
      } + sparse_optimizer(s),

      elmo_sub: base {
        dataset_reader+: {
          tokenizer: {
            type: 'elmoc_sentencepiece_bpe',
            train_data_path: s.train_data_path,
            vocab_size: s.bpe_vocab_size,
            max_training_sentences: s.bpe_training_sentences,
          },
          // The same pieces twice: as input (looked up) and as targets (popped by the model).
          token_indexers: { subwords: single_id('subwords'), targets: single_id('subwords') },
        },
        vocabulary: { type: 'from_instances' },
        model+: {
          type: 'elmoc_bilm',
          tie_output_embedding: 'subwords',
          text_field_embedder: {
            token_embedders: {
              subwords: { type: 'embedding', embedding_dim: P, vocab_namespace: 'subwords' },
            },
          },
          contextualizer+: p_dimensional_input(P),
          output_layer: { type: 'elmoc_softmax', input_dim: P, vocab_namespace: 'subwords' },
          backward_output_layer:: null,
          target_indexer: 'targets',
        },
      },

      // The ELMo-C model itself; what makes it "OneB" is `fasttext_path`: a fastText model
      // trained on the pretraining corpus (see elmoc_oneb.jsonnet).
      elmoc_oneb: base,

      elmoc_rnd: base {
        dataset_reader+: { token_indexers+: { targets: single_id('targets') } },
        vocabulary: {
          type: 'from_instances',
          [if s.random_vocabulary_size != null then 'max_vocab_size']: { targets: s.random_vocabulary_size },
        },
        model+: {
          // Each embedder skips the other's indexer ("empty").
          text_field_embedder: {
            token_embedders: {
              fasttext: { type: 'elmoc_fasttext', vectors_path: s.fasttext_path },
              targets: { type: 'empty' },
            },
          },
          target_embedder: {
            token_embedders: {
              fasttext: { type: 'empty' },
              targets: {
                type: 'embedding',
                embedding_dim: s.embedding_dim,
                vocab_namespace: 'targets',
                trainable: false,
              },
            },
          },
          // Frozen N(0, 1) target vectors.
          initializer: {
            regexes: [['_target_embedder\\..*weight', { type: 'normal', mean: 0.0, std: 1.0 }]],
          },
        },
      },

      // Table 3, CNN-CC: ELMo's trained CNN as input, fastText targets.
      elmoc_cnn_cc: base {
        dataset_reader+: {
          token_indexers+: { elmo_characters: { type: 'elmo_characters' } },
        },
        model+: {
          text_field_embedder: {
            token_embedders: { elmo_characters: char_cnn(s, cnn_dim), fasttext: { type: 'empty' } },
          },
          target_embedder: {
            token_embedders: {
              elmo_characters: { type: 'empty' },
              fasttext: { type: 'elmoc_fasttext', vectors_path: s.fasttext_path },
            },
          },
          contextualizer+: p_dimensional_input(cnn_dim),
        },
      } + pretrained_cnn(s, ['_text_field_embedder']),

      // Table 3, CC-CNN: fastText input, ELMo's trained CNN embeddings of the words as targets.
      elmoc_cc_cnn: base {
        dataset_reader+: {
          token_indexers+: { elmo_characters: { type: 'elmo_characters' } },
        },
        model+: {
          text_field_embedder: {
            token_embedders: {
              fasttext: { type: 'elmoc_fasttext', vectors_path: s.fasttext_path },
              elmo_characters: { type: 'empty' },
            },
          },
          target_embedder: {
            token_embedders: { elmo_characters: char_cnn(s, cnn_dim), fasttext: { type: 'empty' } },
          },
          output_layer+: { embedding_dim: cnn_dim },
        },
      } + pretrained_cnn(s, ['_target_embedder']),

      // Table 3, CNN-CNN: ELMo's trained CNN as input and (the same embeddings) as targets.
      // Frozen, the CNN cannot collapse to one vector as a CNN trained along with the encoder
      // does (every word mapped to nearly the same vector, a trivial zero loss).
      elmoc_cnn_cnn: base {
        dataset_reader+: {
          token_indexers: { elmo_characters: { type: 'elmo_characters' } },
        },
        model+: {
          text_field_embedder: { token_embedders: { elmo_characters: char_cnn(s, cnn_dim) } },
          contextualizer+: p_dimensional_input(cnn_dim),
          output_layer+: { embedding_dim: cnn_dim },
        },
      } + pretrained_cnn(s, ['_text_field_embedder']),
    };
    if std.objectHas(variants, name) then variants[name]
    else error ('unknown baseline ' + name + '; one of ' + std.join(', ', std.objectFields(variants))),
}
