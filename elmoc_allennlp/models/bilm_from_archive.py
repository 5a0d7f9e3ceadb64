"""
Fine-tuning a trained ELMo-C biLM on new text (domain adaptation, as in ULMFiT's target-task LM
fine-tuning): the biLM of an archive as the `model` of an `allennlp train` config, with the
archive's own fastText model.

* `BilmFromArchive` (`Model` "elmoc_bilm_from_archive") loads the biLM of any archive that the
  downstream tools accept (`ElmocArchive`), with its fastText model;
* `archive_with_its_fasttext` resolves that fastText model and refuses a different one;
* `same_fasttext_model` tells whether two `.bin` paths hold the same fastText model.

The `elmoc_finetune` callback (`elmoc_allennlp.training.finetune_callback`) turns the run's
`config.json` into a self-contained `elmoc_bilm` config when training ends, so that the new
`model.tar.gz` is an ordinary biLM archive.
"""
import hashlib
import logging
import os
from pathlib import Path
from typing import Optional, Union

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.models.model import Model

from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel
from elmoc_allennlp.common.elmoc_archive import ElmocArchive

logger = logging.getLogger(__name__)

# The loaded model keeps the `ElmocArchive` it came from under this attribute; the
# `elmoc_finetune` callback reads it.
FINETUNED_FROM_ATTRIBUTE = "elmoc_finetuned_from"

_EDGE_BYTES = 1 << 20
_SAMPLE_BYTES = 1 << 16
_NUM_SAMPLES = 32


def fasttext_fingerprint(path: Union[str, os.PathLike]) -> str:
    """
    A fingerprint of a fastText `.bin`: its size and a SHA-256 of its first and last MiB (the
    header, the start of the dictionary, the end of the matrices) and of 32 evenly spaced
    64 KiB samples of the rest. Two different fastText models (another corpus, another seed,
    other options) differ in these bytes; reading them costs milliseconds even for the 7 GB
    Common Crawl model, where hashing the whole file would take a minute.
    """
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode("ascii"))
    with open(path, "rb") as handle:
        digest.update(handle.read(_EDGE_BYTES))
        if size > 2 * _EDGE_BYTES:
            span = size - 2 * _EDGE_BYTES - _SAMPLE_BYTES
            for index in range(_NUM_SAMPLES):
                handle.seek(_EDGE_BYTES + span * index // max(_NUM_SAMPLES - 1, 1))
                digest.update(handle.read(_SAMPLE_BYTES))
        handle.seek(max(size - _EDGE_BYTES, 0))
        digest.update(handle.read(_EDGE_BYTES))
    return digest.hexdigest()


def same_fasttext_model(first: Union[str, os.PathLike], second: Union[str, os.PathLike]) -> bool:
    """Whether two paths hold the same fastText model (the same file, or identical copies)."""
    first, second = Path(first), Path(second)
    try:
        if os.path.samefile(first, second):
            return True
    except OSError:
        return False
    return fasttext_fingerprint(first) == fasttext_fingerprint(second)


def different_fasttext_error(
    archive_file: str, archive_vectors: str, given_vectors: str, config_key: str
) -> ConfigurationError:
    return ConfigurationError(
        f"fastText model {given_vectors} ({config_key}) is not the one ELMo-C archive "
        f"{archive_file} was pretrained with ({archive_vectors}). The biLM's input projection and "
        "output layer live in the vector space of its own fastText model: fine-tuning keeps that "
        "model (words unseen in pretraining get its subword vectors, in and out), and a different "
        "one would silently give wrong vectors. Leave the option out to use the archive's model, "
        "or give a copy of that same file."
    )


def archive_with_its_fasttext(
    archive_file: Union[str, os.PathLike],
    vectors_path: Optional[str] = None,
    config_key: str = "vectors_path",
) -> ElmocArchive:
    """
    The `ElmocArchive` of a biLM archive, using the fastText model the archive was pretrained
    with. That model is found as `ElmocArchive` finds it (the path in the archive's config, then
    relative to the archive). `vectors_path`, if given, must be the same model (the same file or
    a copy of it): another fastText model is refused with a `ConfigurationError` naming
    `config_key`. When the archive's own model cannot be found on this machine, `vectors_path`
    is accepted if its dimension matches (nothing else can be compared), with a warning.
    """
    archive_file = str(archive_file)
    if vectors_path is None:
        return ElmocArchive.read(archive_file)
    given = ElmocArchive.read(archive_file, vectors_path)
    try:
        own = ElmocArchive.read(archive_file)
    except ConfigurationError as error:
        logger.warning(
            "ELMo-C archive %s: its own fastText model is not on this machine (%s); using %s "
            "(%s), whose dimension matches, without being able to check that it is the same model",
            archive_file,
            error,
            vectors_path,
            config_key,
        )
        return given
    if not same_fasttext_model(own.input_vectors_path, vectors_path):
        raise different_fasttext_error(
            archive_file, own.input_vectors_path, str(vectors_path), config_key
        )
    return given


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
        if model._output_layer.requires_target_ids:
            raise ConfigurationError(
                f"ELMo-C archive {archive_file} (model.archive_file) has a softmax-family output "
                f"layer ({type(model._output_layer).__name__}), whose vocabulary a fine-tuning "
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
