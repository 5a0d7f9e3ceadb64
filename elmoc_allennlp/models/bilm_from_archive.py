"""
Fine-tuning a trained ELMo-C biLM on new text (domain adaptation, as in ULMFiT's target-task LM
fine-tuning): the biLM of an archive as the `model` of an `allennlp train` config, with the
archive's own fastText model.

* `BilmFromArchive` (`Model` "elmoc_bilm_from_archive") loads the biLM of any archive that the
  downstream tools accept (`ElmocArchive`), with its fastText model;
* `archive_with_its_fasttext` (in `common.elmoc_archive`) resolves that fastText model and
  refuses a different one.

The `elmoc_finetune` callback (`elmoc_allennlp.training.finetune_callback`) turns the run's
`config.json` into a self-contained `elmoc_bilm` config when training ends, so that the new
`model.tar.gz` is an ordinary biLM archive.
"""
import logging
from typing import Optional

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.models.model import Model

from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel
from elmoc_allennlp.common.elmoc_archive import archive_with_its_fasttext

logger = logging.getLogger(__name__)

# The loaded model keeps the `ElmocArchive` it came from under this attribute; the
# `elmoc_finetune` callback reads it.
FINETUNED_FROM_ATTRIBUTE = "elmoc_finetuned_from"

class BilmFromArchive(Model):
    """
    Not a model class of its own: `from_archive` returns the trained `BidirectionalLanguageModel`
    of an ELMo-C biLM archive, to be trained further (fine-tuned) by `allennlp train`, e.g. on
    text of the domain where it will be used (`training_configs/pretrain/finetune_domain.jsonnet`).

    Compared with allennlp's own `from_archive` model, it

    * accepts exactly the archives the downstream tools accept (`ElmocArchive`: an `elmoc_bilm`
      with fastText input, both directions, an encoder that returns all its layers), so that the
      result can be used downstream like any other biLM;
    * finds the archive's fastText model where `ElmocArchive` finds it (also relative to a moved
      archive), and refuses a different one (`vectors_path`);
    * refuses softmax-family output layers, whose vocabulary the fine-tuning run would not carry
      over (continuous-output biLMs need none);
    * keeps the archive's description on the model, from which the `elmoc_finetune` callback
      writes a self-contained `elmoc_bilm` config for the new archive.

    Registered as a `Model` with name "elmoc_bilm_from_archive".

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory).
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, if the archive cannot find it; it must
        be that same model (a copy of the file), not another one.
    vocab : `Vocabulary`, optional
        The run's vocabulary (empty for the vocabulary-free ELMo-C); not used.
    """

    @classmethod
    def from_archive(  # type: ignore[override]
        cls,
        archive_file: str,
        vectors_path: Optional[str] = None,
        vocab: Optional[Vocabulary] = None,
    ) -> BidirectionalLanguageModel:
        archive = archive_with_its_fasttext(archive_file, vectors_path, "model.vectors_path")
        model, _ = archive.load_model()
        if not isinstance(model, BidirectionalLanguageModel):
            raise ConfigurationError(
                f"ELMo-C archive {archive_file} (model.archive_file) holds a "
                f"{type(model).__name__}, not a BidirectionalLanguageModel"
            )
        if model.output_layer().requires_target_ids:
            raise ConfigurationError(
                f"ELMo-C archive {archive_file} (model.archive_file) has a softmax-family output "
                f"layer ({type(model.output_layer()).__name__}), whose vocabulary a fine-tuning "
                "run does not carry over; fine-tuning supports continuous-output biLMs "
                "(model.output_layer.type 'continuous')"
            )
        setattr(model, FINETUNED_FROM_ATTRIBUTE, archive)
        logger.info(
            "Fine-tuning the biLM of %s (fastText model %s)",
            archive_file,
            archive.input_vectors_path,
        )
        return model


Model.register("elmoc_bilm_from_archive", constructor="from_archive")(BilmFromArchive)
