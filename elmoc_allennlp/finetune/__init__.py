"""
Fine-tuning a trained biLM on new text (`training_configs/pretrain/finetune_domain.jsonnet`): the
biLM from its archive, its own fastText indexer, layer-wise parameter groups, the resumable
slanted triangular schedule and the callback that makes the result an ordinary biLM archive.
"""
from elmoc_allennlp.finetune.archive_fasttext import ArchiveFastTextIndexer
from elmoc_allennlp.finetune.bilm_from_archive import BilmFromArchive
from elmoc_allennlp.finetune.callback import FineTuneCallback
from elmoc_allennlp.finetune.gradual_unfreezing import RecoverableSlantedTriangular
from elmoc_allennlp.finetune.layer_groups import BilmLayerwiseOptimizer
