// Fine-tune a trained ELMo-C biLM on unlabelled text of your domain (target-task LM fine-tuning,
// Howard & Ruder 2018, "Universal Language Model Fine-tuning for Text Classification" (ULMFiT),
// section 3.2), then use the new archive downstream like any other biLM archive.
//
//   ELMOC_ARCHIVE=runs/elmoc/model.tar.gz \
//   ELMOC_TRAIN_DATA=domain/train.txt ELMOC_VALIDATION_DATA=domain/dev.txt \
//   allennlp train training_configs/pretrain/finetune_domain.jsonnet -s runs/elmoc_domain \
//       --include-package elmoc_allennlp
//
// Text: one tokenized sentence per line, as for pretraining (a file, a folder or a glob);
// ELMOC_VALIDATION_DATA may be '' (no validation: the last epoch is kept).
//
// What comes from the archive (nothing to set): the model, its weights and every hyperparameter
// of it (dropout, recurrent dropout, clipping), the fastText model (the `elmoc_archive_fasttext`
// indexer; a different fastText model is refused), lowercasing and sentence boundaries. Words
// the biLM never saw in pretraining are no problem for its input or its output: both are
// fastText vectors, which any word has (from its character n-grams).
//
// The result (`-s` folder, model.tar.gz) is an ordinary `elmoc_bilm` archive: the `elmoc_finetune`
// callback writes its self-contained config at the end of training.
//
// Settings and where each number comes from (change them with -o, e.g.
// -o '{"trainer.num_epochs": 8, "trainer.optimizer.optimizer.lr": 1e-3}'):
// * Layer groups, bottom to top: the input projection ("layer 0"), each LSTM layer (forward
//   and backward together), the output layer: `elmoc_bilm_layerwise` makes one optimizer
//   parameter group per layer, the order `slanted_triangular` reads them in.
// * Discriminative fine-tuning: each group's learning rate is the one above it divided by 2.6
//   (decay_factor 1 / 2.6; ULMFiT section 3.2, eq. 2 and the text after it).
// * Slanted triangular learning rates: a linear rise over the first 10% of the steps to the peak,
//   a linear decay to 1/32 of it (cut_frac 0.1, ratio 32; ULMFiT section 3.2, eq. 3).
// * Gradual unfreezing: epoch 1 trains only the output layer, epoch 2 also the top LSTM layer,
//   and so on; all layers train from epoch L + 2 on (ULMFiT section 3.3). ULMFiT uses it for the
//   classifier stage; here it protects the general-domain biLM while its output layer adapts.
// * Adam with beta1 = 0.7, beta2 = 0.99, batch size 64 (ULMFiT section 4.1, hyperparameters).
// * Peak learning rate 2e-3 (ours): the learning rate the quickstart biLM was pretrained with
//   (elmoc_small.jsonnet); ULMFiT's 4e-3 for LM fine-tuning (section 4.1) was tuned for its
//   AWD-LSTM. For a biLM pretrained at a lower rate (the paper's elmoc.jsonnet: 2e-4 at batch
//   256) use about that rate.
// * num_epochs 6 (ours): ULMFiT tunes the number of epochs on validation data (section 4.1).
//   A 2-layer biLM has 4 groups, so epochs 1-3 unfreeze and epochs 4-6 train all layers; the
//   best epoch by validation loss is kept (the `-s` folder's best.th / model.tar.gz).
// * Gradient norm clipped at 1.0 (as in pretraining, elmoc.libsonnet).
// Measured on SST-5 text with the quickstart biLM: README.md, "Fine-tune on your domain".
local archive = std.extVar('ELMOC_ARCHIVE');
local validation_data = std.extVar('ELMOC_VALIDATION_DATA');

local reader = {
  type: 'elmoc_lm_corpus',
  // Longer sentences are split, as in pretraining (elmoc_small.jsonnet).
  max_sequence_length: 100,
  token_indexers: {
    // The key must be the biLM's input key: 'fasttext' in every training_configs/pretrain config.
    fasttext: { type: 'elmoc_archive_fasttext', archive_file: archive },
  },
};

{
  dataset_reader: reader,
  train_data_path: std.extVar('ELMOC_TRAIN_DATA'),
  [if validation_data != '' then 'validation_data_path']: validation_data,
  vocabulary: { type: 'empty' },
  model: { type: 'elmoc_bilm_from_archive', archive_file: archive },
  data_loader: {
    type: 'elmoc_corpus',  // knows its length from the corpus index
    batch_sampler: { type: 'bucket', batch_size: 64, sorting_keys: ['tokens'] },
  },
  trainer: {
    type: 'elmoc_gradient_descent',
    num_epochs: 6,
    grad_norm: 1.0,
    optimizer: {
      type: 'elmoc_bilm_layerwise',
      optimizer: { type: 'adam', lr: 2e-3, betas: [0.7, 0.99] },
    },
    learning_rate_scheduler: {
      type: 'elmoc_slanted_triangular',
      cut_frac: 0.1,
      ratio: 32,
      discriminative_fine_tuning: true,
      decay_factor: 1 / 2.6,
      gradual_unfreezing: true,
    },
    validation_metric: '-loss',
    checkpointer: { type: 'elmoc_atomic', keep_most_recent_by_count: 2 },
    callbacks: [{ type: 'elmoc_finetune' }],
  },
  include_in_archive: ['config_finetune.json'],
}
