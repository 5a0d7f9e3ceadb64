"""Fine-tuning a trained biLM on new text: every piece of `finetune_domain.jsonnet` that is not stock allennlp."""

from elmoc_allennlp.finetune.archive_fasttext import ArchiveFastTextIndexer, BilmFromArchive
from elmoc_allennlp.finetune.callback import FineTuneCallback
from elmoc_allennlp.finetune.gradual_unfreezing import RecoverableSlantedTriangular
from elmoc_allennlp.finetune.layer_groups import BilmLayerwiseOptimizer
