// Shared builder for ELMo-C pretraining configs (`elmoc.jsonnet`, `elmoc_small.jsonnet`, and the
// output-layer baselines). Each config file calls `elmoc.config({...})` with the settings that
// differ; the defaults below are the paper's ELMo-C (Li, Chen, Hsieh, Chang, TACL 2019).
{
  config(settings)::
    local s = {
      fasttext_path: error 'fasttext_path is required',
      embedding_dim: error 'embedding_dim (the fastText dimension) is required',
      train_data_path: error 'train_data_path is required',
      validation_data_path: null,
      // Lowercase tokens before the fastText lookup (for a lowercased corpus and fastText model);
      // the archive records it, so the downstream `elmoc_subwords` indexer lowercases too.
      lowercase_tokens: false,
      // Model: ELMo's LSTM with projection, 2 layers, 4096 cells -> 512 (Peters et al. 2018), with
      // LayerNorm inside the recurrence (ELMo-C section 3.2).
      projection_dim: 512,
      cell_dim: 4096,
      num_layers: 2,
      layer_norm: true,
      cell_clip: 3.0,
      projection_clip: 3.0,
      // Dropout 0.1 on the LSTM output and 0.1 recurrent: the authors' released config (config.json).
      dropout: 0.1,
      recurrent_dropout: 0.1,
      loss: 'cosine',
      // Sentences, not fixed windows: longer ones are split (reader `max_sequence_length`).
      max_sequence_length: 200,
      batch_size: 256,
      num_epochs: 10,
      // Adam + RNMT+ schedule (Chen et al. 2018). The authors' released code: lr0 = 1e-4 * batch /
      // 128, warm-up 10,000 steps, decay from step 0.4 * 4e8 / batch to step 2.0 * 4e8 / batch,
      // n = 4 GPUs; gradient norm clipped to 1.0. `rnmt_plus` compares s and e with n * step (as
      // the RNMT+ paper does), so they are scaled by n here to decay over the same steps.
      learning_rate: 1e-4 * self.batch_size / 128,
      warmup_steps: 10000,
      decay_start: self.num_replicas * std.floor(0.4 * 4e8 / self.batch_size),
      decay_end: self.num_replicas * std.floor(2.0 * 4e8 / self.batch_size),
      num_replicas: 4,
      grad_norm: 1.0,
      max_instances_in_memory: 100 * self.batch_size,
      cuda_device: -1,
      num_workers: 0,
      // --- Scale and fault tolerance (docs/scale_and_fault_tolerance.md) ---
      // Distributed training on allennlp's engine (torch DDP): one worker process per entry,
      // e.g. [0, 1, 2, 3] for 4 GPUs (NCCL) or [-1, -1] for 2 CPU processes (gloo). batch_size
      // is per worker: the global batch is batch_size * number of workers * num_nodes.
      cuda_devices: null,
      // Multi-node: the same config on every node, `allennlp train ... --node-rank R`.
      num_nodes: 1,
      primary_address: null,
      primary_port: null,
      // Train 'forward' or 'backward' only, as two jobs to merge with `allennlp elmoc-merge-bilm`.
      directions: 'both',
      // Crash-safe checkpoints (`elmoc_atomic`); set a step interval for long epochs so that a
      // crash loses at most that many steps (null: only at the end of each epoch).
      checkpoint_every_num_batches: null,
      keep_checkpoints: 2,
      // Mixed precision (needs a GPU).
      use_amp: false,
      // Per-step log of loss and all-reduce bytes (`elmoc_step_log`), step_log_w<rank>.jsonl.
      step_log: false,
    } + settings;
    {
      dataset_reader: {
        type: 'elmoc_lm_corpus',
        max_sequence_length: s.max_sequence_length,
        token_indexers: {
          fasttext: {
            type: 'elmoc_fasttext_subwords',
            vectors_path: s.fasttext_path,
            [if s.lowercase_tokens then 'lowercase_tokens']: true,
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
        },
        output_layer: {
          type: 'elmoc_continuous',
          input_dim: s.projection_dim,
          embedding_dim: s.embedding_dim,
          loss: s.loss,
        },
        dropout: s.dropout,
        [if s.directions != 'both' then 'directions']: s.directions,
      },
      data_loader: {
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
        optimizer: { type: 'adam', lr: s.learning_rate },
        learning_rate_scheduler: {
          type: 'elmoc_rnmt_plus',
          warmup_steps: s.warmup_steps,
          decay_start: s.decay_start,
          decay_end: s.decay_end,
          num_replicas: s.num_replicas,
        },
        validation_metric: '-loss',
        checkpointer: {
          type: 'elmoc_atomic',
          save_every_num_batches: s.checkpoint_every_num_batches,
          keep_most_recent_by_count: s.keep_checkpoints,
        },
        [if s.use_amp then 'use_amp']: true,
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
