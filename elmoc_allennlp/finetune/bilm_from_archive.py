"""The biLM of an archive as the `model` of a fine-tuning run (ULMFiT's target-task LM fine-tuning)."""
import logging
from typing import Optional

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.models.model import Model

from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel
from elmoc_allennlp.finetune.archive_fasttext import archive_with_its_fasttext

logger = logging.getLogger(__name__)


@Model.register("elmoc_bilm_from_archive", constructor="from_archive")
class BilmFromArchive(Model):
    """
    `from_archive` returns the `BidirectionalLanguageModel` of an ELMo-C biLM archive, to be
    fine-tuned (`finetune_domain.jsonnet`): unlike allennlp's `from_archive`, only archives
    `BilmArchive` accepts, with their own fastText model, and no softmax-family output layer
    (whose vocabulary the run would not carry over).

    Registered as a `Model` with name "elmoc_bilm_from_archive".

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory).
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with (a copy), if the archive cannot find it.
    vocab : `Vocabulary`, optional
        The run's vocabulary; not used.
    """

    @classmethod
    def from_archive(  # type: ignore[override]
        cls, archive_file: str, vectors_path: Optional[str] = None, vocab: Optional[Vocabulary] = None
    ) -> BidirectionalLanguageModel:
        archive = archive_with_its_fasttext(archive_file, vectors_path, "model.vectors_path")
        model, _ = archive.load()
        if not isinstance(model, BidirectionalLanguageModel):
            raise ConfigurationError(
                f"ELMo-C archive {archive_file} (model.archive_file) holds a "
                f"{type(model).__name__}, not a BidirectionalLanguageModel"
            )
        if model.output_layer().requires_target_ids:
            raise ConfigurationError(
                f"ELMo-C archive {archive_file} (model.archive_file) has a softmax-family output "
                f"layer ({type(model.output_layer()).__name__}); fine-tuning supports "
                "continuous-output biLMs (model.output_layer.type 'continuous')"
            )
        logger.info("Fine-tuning the biLM of %s (fastText model %s)", archive_file, archive.input_vectors_path)
        return model
