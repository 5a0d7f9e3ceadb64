// Shared builder for ELMo-C pretraining configs (`elmoc.jsonnet`, `elmoc_small.jsonnet`, and the
// baselines of baselines.libsonnet). A config calls `elmoc.config({...})` with the settings that
// differ from the defaults below, which are the recipe of Li, Chen, Hsieh, Chang, "Efficient
// Contextual Representation Learning With Continuous Outputs" (TACL 2019). Each default says
// where it comes from: "paper" (section or table), "authors" (their released code, GitHub
// uclanlp/ELMO-C: file and key; `config.json` unless another file is named) or "ours" (with the
// reason). An unknown setting is an error that names it and the setting it probably meant.
local checks = import 'settings.libsonnet';

local defaults = {
  fasttext_path: error 'fasttext_path is required',
  embedding_dim: error 'embedding_dim (the fastText dimension) is required',
  train_data_path: error 'train_data_path is required',
  validation_data_path: null,
  // Lowercase tokens before the fastText lookup: null follows the fastText model (lowercase if its
  // dictionary has no uppercase letter, i.e. it was trained on lowercased text); true / false force it.
  // The downstream `elmoc_bilm_inputs` indexer lowercases as pretraining did.
  lowercase_tokens: null,

  // --- Model ---
  // ELMo's LSTM with projection (Peters et al. 2018), 2 layers of 4096 cells -> 512. Authors:
  // rnn_layer.num_layers 2, hidden_size 4096, projection_size 512.
  projection_dim: 512,
  cell_dim: 4096,
  num_layers: 2,
  // LayerNorm of the input projection and of the projected state inside the recurrence. Paper
  // section 4.1; authors: rnn_layer.layer_norm true, ln_before_act true
  // (source/models/custom_elmo_lstm.py: `ln_i2c` after `input_projection`).
  layer_norm: true,
  // Authors: source/models/complete_elmo.py, memory_cell_clip_value 3,
  // state_projection_clip_value 3.
  cell_clip: 3.0,
  projection_clip: 3.0,
  // The input projection Linear(300, 512) has a bias. Authors: custom_elmo_lstm.py,
  // `torch.nn.Linear(input_size, hidden_size)` (bias by default).
  input_projection_bias: true,
  // Two independent LMs: one input projection + LayerNorm and one output layer per direction.
  // Paper footnote 7 (the two directions trained separately); authors: rnn_layer.bidirectional
  // false ("we separately train the forward and backward LM"), each LM with its own
  // `input_projection` and output layer (complete_elmo.py `additional_linear_layer`).
  separate_input_projections: true,
  separate_output_layers: true,
  // Authors: output_layer.dropout 0.0 (complete_elmo.py applies no dropout after the RNN when
  // it is 0).
  dropout: 0.0,
  // Variational dropout on the recurrent state. Authors: rnn_layer.dropout 0.1, passed as
  // `recurrent_dropout_probability` (complete_elmo.py).
  recurrent_dropout: 0.1,
  // Paper section 3; authors: loss.name "cosine".
  loss: 'cosine',

  // --- Data ---
  // 'window': fixed windows of `window_length` predicted tokens running across sentence
  // boundaries (paper section 5.2.2, 20-token inputs; authors: dataset.bptt 20, windows cut from
  // the concatenated sentences of a shard, source/data.py `get_batch_parallel`).
  // 'sentence': one sentence per instance, longer ones split at `max_sequence_length` (ours, the
  // way ELMo-C embeds text downstream). Setting `max_sequence_length` selects 'sentence'.
  mode: if self.max_sequence_length != null then 'sentence' else 'window',
  window_length: 20,
  max_sequence_length: null,
  // Instances (windows) per step and per worker: paper Table 2, 768 per GPU (4 GPUs: a global
  // batch of 3072). The schedule below follows the global batch, whatever the number of workers.
  batch_size: 768,
  // Paper section 4: 10 epochs of the One Billion Word Benchmark.
  num_epochs: 10,
  // Instances held (and shuffled) in memory by the data loader: ours, to bound memory.
  max_instances_in_memory: 100 * self.batch_size,
  // Every epoch reads the files, and the sentences within each file, in a new order drawn from
  // (seed, epoch), the same on every rank and after --recover. Authors: source/data.py
  // (`random.shuffle(self.all_files)` at every pass, `random.shuffle(data)` in each file).
  shuffle: true,

  // --- Optimizer and schedule ---
  // Adam, eps 1e-6, betas (0.9, 0.999), no weight decay. Authors:
  // stand_alone_scripts/train.py, the Adam of `NoamOpt_ADAM`.
  learning_rate: 1e-4,  // lr0. Authors: optimizer.base_scale 1e-4.
  adam_epsilon: 1e-6,
  // Gradient norm clipping. Authors: other_stuff.clip 1.0 (train.py `sparse_clip_norm`), in each
  // direction's own job; elmoc_gradient_descent clips each direction on its own here too.
  grad_norm: 1.0,
  // 'authors' (`elmoc_rnmt_plus`): source/models/optimizers.py `NoamOpt_ADAM` set up as
  // stand_alone_scripts/parse_config.py does, for the global batch B (instances per step, all
  // workers): lr(t) = lr0 * min(1 + t (n - 1) / p, n, n (2n)^((s - t) / (e - s))), lr0 / 2 from
  // t = e, with n = B / 128, p = optimizer.warmup 10000, s = 0.4 * 4e8 / B and e = 2.0 * 4e8 / B
  // steps (optimizer.decay_ratio 0.4, end_decay_ratio 2.0; 4e8 windows of 20 tokens are 10
  // epochs of One Billion Word).
  // 'rnmt_plus': the published RNMT+ formula (Chen et al. 2018) with explicit steps
  // `warmup_steps`, `decay_start`, `decay_end` and `num_replicas`; setting `decay_start` or
  // `decay_end` selects it.
  // 'run_fractions' (`elmoc_rnmt_plus_run`, ours): the RNMT+ formula with its warm-up end and
  // decay start and end at fractions of the run's optimizer steps (`warmup_fraction` (default 0),
  // `decay_start_fraction` (0.5), `decay_end_fraction` (1.0)), the steps counted from the data
  // loader's length at run time: a corpus of any length decays alike. Setting a fraction selects it.
  schedule:
    if self.decay_start != null || self.decay_end != null then 'rnmt_plus'
    else if self.warmup_fraction != null || self.decay_start_fraction != null
            || self.decay_end_fraction != null then 'run_fractions'
    else 'authors',
  warmup_steps: 10000,
  decay_start_instances: 0.4 * 4e8,
  decay_end_instances: 2.0 * 4e8,
  reference_batch_size: 128,
  decay_start: null,
  decay_end: null,
  warmup_fraction: null,
  decay_start_fraction: null,
  decay_end_fraction: null,
  num_replicas: 1,
  cuda_device: -1,
  // Data-loader worker processes (not data-parallel workers, see cuda_devices).
  num_workers: 0,

  // --- Scale and fault tolerance (docs/scale_and_fault_tolerance.md); all ours ---
  // Distributed training on allennlp's engine (torch DDP): one worker process per entry,
  // e.g. [0, 1, 2, 3] for 4 GPUs (NCCL) or [-1, -1] for 2 CPU processes (gloo). batch_size
  // is per worker: the global batch is batch_size * number of workers * num_nodes.
  cuda_devices: null,
  // Multi-node: the same config on every node, `allennlp train ... --node-rank R`.
  num_nodes: 1,
  primary_address: null,
  primary_port: null,
  // 'both': the two LMs in one job, exactly as two jobs (loss = sum of the directions' losses,
  // per-direction clipping). 'forward' / 'backward': one LM per job, merged with
  // `allennlp elmoc-merge-bilm`. Authors: rnn_layer.bidirectional false (one job per direction;
  // whether on 2 + 2 or 4 + 4 GPUs is not in their code: README "Config reference").
  directions: 'both',
  // Crash-safe checkpoints (`elmoc_atomic`); set a step interval for long epochs so that a
  // crash loses at most that many steps (null: only at the end of each epoch).
  checkpoint_every_num_batches: null,
  keep_checkpoints: 2,
  // Mixed precision. `precision: 'bfloat16'` (the trainer's option, issue #51): forward passes
  // under bfloat16 autocast where the device has native bfloat16 (CPUs with AVX-512 BF16 or AMX,
  // CUDA GPUs from Ampere on), else float32 with one line saying so; master weights, LayerNorm
  // statistics and the loss in float32 (docs/pretraining.md#mixed-precision). `use_amp`:
  // allennlp's float16 autocast with loss scaling, GPU only. Not both.
  precision: 'float32',
  use_amp: false,
  // Per-step log of loss, sentences and tokens (`elmoc_step_log`), step_log_w<rank>.jsonl.
  step_log: false,
};

local schedulers(s) = {
  // B is not given: the elmoc_gradient_descent trainer derives it from the loader's batch size,
  // the gradient accumulation and the world size.
  authors: {
    type: 'elmoc_rnmt_plus',
    warmup_steps: s.warmup_steps,
    decay_start_instances: s.decay_start_instances,
    decay_end_instances: s.decay_end_instances,
    reference_batch_size: s.reference_batch_size,
  },
  rnmt_plus: {
    type: 'elmoc_rnmt_plus_steps',
    warmup_steps: s.warmup_steps,
    decay_start: if s.decay_start != null then s.decay_start else error "schedule 'rnmt_plus' needs decay_start",
    decay_end: if s.decay_end != null then s.decay_end else error "schedule 'rnmt_plus' needs decay_end",
    num_replicas: s.num_replicas,
  },
  // The fractions not set are the scheduler's defaults (0, 0.5, 1.0).
  run_fractions: { type: 'elmoc_rnmt_plus_run', num_replicas: s.num_replicas } + {
    [key]: s[key]
    for key in ['warmup_fraction', 'decay_start_fraction', 'decay_end_fraction']
    if s[key] != null
  },
};

local choice(name, value, options) =
  if std.member(options, value) then value
  else error (name + ' must be one of ' + std.join(', ', options) + ', got ' + std.toString(value));

// Settings that only apply with another setting's value: an error when set without it.
local inapplicable(settings, s) = [
  checks.onlyWith(settings, 'window_length', s.mode == 'window', "applies to mode 'window'"),
  checks.onlyWith(settings, 'max_sequence_length', s.mode == 'sentence', "applies to mode 'sentence'"),
] + [
  checks.onlyWith(settings, key, s.schedule == 'authors', "applies to schedule 'authors'")
  for key in ['decay_start_instances', 'decay_end_instances', 'reference_batch_size']
] + [
  checks.onlyWith(settings, key, s.schedule == 'rnmt_plus', "applies to schedule 'rnmt_plus'")
  for key in ['decay_start', 'decay_end']
] + [
  checks.onlyWith(settings, key, s.schedule == 'run_fractions', "applies to schedule 'run_fractions'")
  for key in ['warmup_fraction', 'decay_start_fraction', 'decay_end_fraction']
] + [
  checks.onlyWith(settings, 'warmup_steps', s.schedule != 'run_fractions',
                  "applies to schedules 'authors' and 'rnmt_plus' ('run_fractions': warmup_fraction)"),
  checks.onlyWith(settings, 'num_replicas', s.schedule != 'authors',
                  "applies to schedules 'rnmt_plus' and 'run_fractions'"),
];

{
  defaults:: defaults,

  // `extra_known`: further setting names the caller handles itself (baselines.libsonnet).
  config(settings, extra_known=[])::
    local checked = checks.check('elmoc.config', std.objectFields(defaults) + extra_known, settings);
    local s = defaults + checked;
    local mode = choice('mode', s.mode, ['window', 'sentence']);
    local schedule = choice('schedule', s.schedule, ['authors', 'rnmt_plus', 'run_fractions']);
    assert std.length([x for x in inapplicable(settings, s) if x != null]) == 0;
    local output_layer = {
      type: 'elmoc_continuous',
      input_dim: s.projection_dim,
      embedding_dim: s.embedding_dim,
      loss: s.loss,
    };
    {
      dataset_reader: {
        type: 'elmoc_lm_corpus',
        mode: mode,
        [if s.shuffle then 'shuffle']: true,
        [if mode == 'window' then 'window_length']: s.window_length,
        [if mode == 'sentence' && s.max_sequence_length != null then 'max_sequence_length']:
          s.max_sequence_length,
        token_indexers: {
          fasttext: {
            type: 'elmoc_fasttext_subwords',
            vectors_path: s.fasttext_path,
            // `</S>` is fastText's `</s>` and `<S>` a word of its own (its subword vector), two
            // vectors as the authors' `<s>` / `</s>` (source/models/build_word_vectors.py:
            // `get_word_vector` of each); `<S>` is their `<s>` exactly with lowercase_tokens.
            boundary_tokens: ['</S>'],
            [if s.lowercase_tokens != null then 'lowercase_tokens']: s.lowercase_tokens,
          },
        },
      },
      train_data_path: s.train_data_path,
      [if s.validation_data_path != null then 'validation_data_path']: s.validation_data_path,
      // Vocabulary-free: the fastText indexer needs no vocabulary, so no pass over the corpus.
      vocabulary: { type: 'empty' },
      model: {
        type: 'elmoc_bilm',
        text_field_embedder: {
          token_embedders: {
            fasttext: { type: 'elmoc_fasttext', vectors_path: s.fasttext_path },
          },
        },
        contextualizer: {
          type: 'elmoc_lstm',
          input_dim: s.embedding_dim,
          projection_dim: s.projection_dim,
          cell_dim: s.cell_dim,
          num_layers: s.num_layers,
          layer_norm: s.layer_norm,
          cell_clip: s.cell_clip,
          projection_clip: s.projection_clip,
          recurrent_dropout: s.recurrent_dropout,
          input_projection_bias: s.input_projection_bias,
          separate_input_projections: s.separate_input_projections,
        },
        output_layer: output_layer,
        // The same layer as `output_layer` (a variant that changes the output layer changes
        // both: see baselines.libsonnet).
        [if s.separate_output_layers then 'backward_output_layer']: self.output_layer,
        dropout: s.dropout,
        [if s.directions != 'both' then 'directions']: s.directions,
      },
      data_loader: {
        // allennlp's multiprocess loader that knows an epoch's batches from the corpus index
        // (progress bars with a total and an ETA).
        type: 'elmoc_corpus',
        batch_sampler: { type: 'bucket', batch_size: s.batch_size, sorting_keys: ['tokens'] },
        max_instances_in_memory: s.max_instances_in_memory,
        num_workers: s.num_workers,
      },
      trainer: {
        // allennlp's gradient_descent, but --recover skips completed epochs without reading them.
        type: 'elmoc_gradient_descent',
        num_epochs: s.num_epochs,
        cuda_device: s.cuda_device,
        grad_norm: s.grad_norm,
        // allennlp's only confidence check (NormalizationBiasVerification) rejects a bias before a
        // LayerNorm as cancelled by it. LayerNorm subtracts the mean over the features, which
        // removes only the bias's mean, not the bias; the authors' input projection has one.
        run_confidence_checks: false,
        optimizer: { type: 'adam', lr: s.learning_rate, eps: s.adam_epsilon },
        learning_rate_scheduler: schedulers(s)[schedule],
        validation_metric: '-loss',
        checkpointer: {
          type: 'elmoc_atomic',
          save_every_num_batches: s.checkpoint_every_num_batches,
          keep_most_recent_by_count: s.keep_checkpoints,
        },
        [if s.use_amp then 'use_amp']: true,
        [if s.precision != 'float32' then 'precision']: s.precision,
        [if s.step_log then 'callbacks']: [{ type: 'elmoc_step_log' }],
      },
      [if s.cuda_devices != null then 'distributed']: {
        cuda_devices: s.cuda_devices,
        [if s.num_nodes != 1 then 'num_nodes']: s.num_nodes,
        [if s.primary_address != null then 'primary_address']: s.primary_address,
        [if s.primary_port != null then 'primary_port']: s.primary_port,
      },
    },
}
