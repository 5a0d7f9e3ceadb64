"""A biLM archive with its own fastText model: the biLM to fine-tune and its indexer."""

import logging
import os
from typing import Optional

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.data.token_indexers.token_indexer import TokenIndexer
from allennlp.models.model import Model

from elmoc_allennlp.common.atomic_files import same_file
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.downstream.archive import VECTORS_PATH_KEY, BilmArchive, PathLike
from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel

logger = logging.getLogger(__name__)


def same_fasttext_model(first: PathLike, second: PathLike) -> bool:
    """Whether two paths hold the same fastText model (the same file, or identical copies)."""
    if same_file(first, second):
        return True
    return (
        FastTextVectors.from_path(first).fingerprint
        == FastTextVectors.from_path(second).fingerprint
    )


def different_fasttext_error(
    archive_file: str, archive_vectors: str, given_vectors: str, config_key: str
) -> ConfigurationError:
    return ConfigurationError(
        f"fastText model {given_vectors} ({config_key}) is not the one ELMo-C archive "
        f"{archive_file} was pretrained with ({archive_vectors}): the biLM lives in the vector "
        "space of its own fastText model. Leave the option out, or give a copy of that file."
    )


def archive_with_its_fasttext(
    archive_file: PathLike, vectors_path: Optional[str] = None, config_key: str = "vectors_path"
) -> BilmArchive:
    """The `BilmArchive` of a fastText-input biLM; `vectors_path` must be its own fastText model or a copy."""
    archive_file = os.fspath(archive_file)
    given = BilmArchive.open(archive_file, vectors_path)
    if given.input_vectors_path is None:
        raise ConfigurationError(
            f"biLM archive {archive_file} has {given.input_kind.name} input (model.text_field_embedder."
            f"token_embedders.{given.input_key}): fine-tuning needs a fastText-input biLM"
        )
    if vectors_path is None:
        return given
    try:
        own = BilmArchive.open(archive_file)
    except ConfigurationError as error:
        logger.warning(
            "%s: its own fastText model is missing (%s); using %s",
            archive_file,
            error,
            vectors_path,
        )
        return given
    if not same_fasttext_model(own.input_vectors_path, vectors_path):
        raise different_fasttext_error(
            archive_file, own.input_vectors_path, vectors_path, config_key
        )
    return given


@TokenIndexer.register("elmoc_archive_fasttext")
class ArchiveFastTextIndexer(FastTextSubwordIndexer):
    """
    The `elmoc_fasttext_subwords` indexer a biLM archive was pretrained with, for fine-tuning it.

    Registered as a `TokenIndexer` with name "elmoc_archive_fasttext".

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory): the same as
        `elmoc_bilm_from_archive`'s, whose pretraining indexer (boundary tokens, casing) this is.
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if the archive cannot find it (another model is refused).
    token_min_padding_length : `int`, optional (default = `0`)
        The least number of tokens a batch is padded to (allennlp `TokenIndexer`'s), for models
        whose encoder needs a minimum length (a CNN's widest filter); `0`: none.
    """

    def __init__(
        self,
        archive_file: str,
        vectors_path: Optional[str] = None,
        token_min_padding_length: int = 0,
    ) -> None:
        archive = archive_with_its_fasttext(
            archive_file, vectors_path, "dataset_reader.token_indexers.<key>.vectors_path"
        )
        reader_key = f"dataset_reader.token_indexers.{archive.input_key}.{VECTORS_PATH_KEY}"
        super().__init__(
            vectors_path=archive.vectors_overrides[reader_key],
            boundary_tokens=archive.boundary_tokens,
            lowercase_tokens=archive.lowercase_tokens,
            token_min_padding_length=token_min_padding_length,
        )


@Model.register("elmoc_bilm_from_archive", constructor="from_archive")
class BilmFromArchive(Model):
    """
    `from_archive` returns the `BidirectionalLanguageModel` of an ELMo-C biLM archive to fine-tune: only
    archives `BilmArchive` accepts, with their own fastText model and a continuous output layer.

    Registered as a `Model` with name "elmoc_bilm_from_archive".

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory).
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with (a copy), if the archive cannot find it.
    vocab : `Vocabulary`, optional (default = `None`)
        The run's vocabulary (given by allennlp); not used: the biLM keeps its archive's own (its
        continuous output layer needs none).
    """

    @classmethod
    def from_archive(  # type: ignore[override]
        cls,
        archive_file: str,
        vectors_path: Optional[str] = None,
        vocab: Optional[Vocabulary] = None,
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
        logger.info(
            "Fine-tuning the biLM of %s (fastText model %s)",
            archive_file,
            archive.input_vectors_path,
        )
        return model
