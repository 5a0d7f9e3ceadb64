"""
`ElmocArchive`: what a downstream user needs to know about a trained biLM archive, read from its
`config.json` without loading the weights. The biLM model is recognised by its registered name,
so nothing here imports it.
"""
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.models.archival import load_archive

from elmoc_allennlp.common.archives import find_keys, read_archive
from elmoc_allennlp.common.bilm_inputs import FASTTEXT_INPUT, find_bilm_input
from elmoc_allennlp.common.fasttext_vectors import FastTextVectors

logger = logging.getLogger(__name__)

# The registered name of the biLM `Model` (`BidirectionalLanguageModel`).
BILM_MODEL_TYPE = "elmoc_bilm"
# The key of the fastText file in the fastText embedder's and indexer's configs.
VECTORS_PATH_KEY = "vectors_path"
# How many trailing components of a recorded vectors path are tried relative to the archive.
_MAX_RELATIVE_COMPONENTS = 3


def _registered_class(base: type, name: Any) -> Optional[type]:
    """The class `name` resolves to under the registrable `base`, or `None`."""
    if not isinstance(name, str):
        return None
    try:
        return base.resolve_class_name(name)[0]
    except ConfigurationError:
        return None


class ElmocArchive:
    """
    What a downstream user needs to know about a biLM archive, read from its `config.json`: the
    text field key and kind of its input (`input_key`, `input_kind`, see `common.bilm_inputs`),
    its boundary tokens and, for fastText input, where its fastText model is on this machine.

    The fastText `.bin` is not in the archive: the path its config records is used if it exists,
    else the last one to three components of that path under the archive's folder and its parent
    (an archive moved together with its vectors still works).

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory, or a URL).
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, overriding the path in the archive.
    """

    def __init__(self, archive_file: Union[str, os.PathLike], vectors_path: Optional[str] = None):
        self.archive_file = str(archive_file)
        try:
            self.local_path = Path(cached_path(self.archive_file))
        except FileNotFoundError:
            where = f"relative to the working directory, {Path.cwd()}"
            raise self._error(f"(archive_file) does not exist ({where})") from None
        self.extracted = read_archive(self.local_path, self.archive_file)
        self.config = self.extracted.config
        try:
            self._describe(vectors_path)
        except BaseException:
            self.extracted.release()  # nothing of a refused archive stays in the temp folder
            raise

    def _describe(self, vectors_path: Optional[str]) -> None:
        # The corpus reader owns the default boundary tokens (imported here: the data package's
        # indexers import this module).
        from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import DEFAULT_END_TOKEN, DEFAULT_START_TOKEN

        self._check_model()
        self.input_key, self.input_kind = find_bilm_input(self.archive_file, self.config)
        reader = self.config.get("dataset_reader", {})
        indexer = reader.get("token_indexers", {}).get(self.input_key, {})
        default_boundaries = [DEFAULT_START_TOKEN, DEFAULT_END_TOKEN]
        self.boundary_tokens: List[str] = list(indexer.get("boundary_tokens", default_boundaries))
        self.lowercase_tokens = bool(indexer.get("lowercase_tokens", False))
        # Pretraining may have cut long tokens (`elmoc_lm_corpus`'s max_token_characters).
        self.max_token_characters: Optional[int] = reader.get("max_token_characters")
        self.start_token = reader.get("start_token", DEFAULT_START_TOKEN)
        self.end_token = reader.get("end_token", DEFAULT_END_TOKEN)
        if not self.start_token or not self.end_token:
            raise self._error("has no dataset_reader.start_token / end_token")
        self.vectors_overrides = self._resolve_vectors_paths(vectors_path)
        # The fastText model of a fastText-input biLM (None for other inputs).
        self.input_vectors_path: Optional[str] = None
        if self.input_kind == FASTTEXT_INPUT:
            self.input_vectors_path = self.vectors_overrides[self._embedder_vectors_key]
            expected = self.config["model"]["contextualizer"].get("input_dim")
            dim = FastTextVectors.from_path(self.input_vectors_path).dim
            if expected is not None and dim != expected:
                raise self._error(
                    f"gets fastText vectors of dimension {dim} ({self.input_vectors_path}), not "
                    f"model.contextualizer.input_dim = {expected}: wrong vectors_path?"
                )

    def _error(self, problem: str) -> ConfigurationError:
        return ConfigurationError(f"ELMo-C archive {self.archive_file} {problem}")

    @property
    def _embedder_key(self) -> str:
        return f"model.text_field_embedder.token_embedders.{self.input_key}"

    @property
    def _embedder_vectors_key(self) -> str:
        return f"{self._embedder_key}.{VECTORS_PATH_KEY}"

    def _check_model(self) -> None:
        from allennlp.models import Model
        from allennlp.modules import Seq2SeqEncoder

        model = self.config["model"]
        model_class = _registered_class(Model, model.get("type"))
        bilm_class = Model.resolve_class_name(BILM_MODEL_TYPE)[0]
        if not (isinstance(model_class, type) and issubclass(model_class, bilm_class)):
            raise self._error(f"(archive_file) is not an ELMo-C biLM archive: model.type is {model.get('type')!r}")
        directions = model.get("directions", "both")
        if directions != "both":
            raise self._error(f"has model.directions {directions!r}: merge it first (elmoc-merge-bilm)")
        contextualizer = model.get("contextualizer")
        encoder_type = contextualizer.get("type") if isinstance(contextualizer, dict) else None
        if not hasattr(_registered_class(Seq2SeqEncoder, encoder_type), "forward_all_layers"):
            raise self._error(f"has model.contextualizer {encoder_type!r}, not one returning all layers")
        if "projection_dim" not in contextualizer:
            raise self._error("has no model.contextualizer.projection_dim")

    def _archive_directories(self) -> List[Path]:
        return folder_and_parent(self.local_path if self.local_path.is_dir() else self.local_path.parent)

    def _candidates(self, recorded: str) -> List[Path]:
        recorded_path = Path(recorded).expanduser()
        candidates = [recorded_path]
        if not recorded_path.is_absolute():
            candidates.extend(base / recorded_path for base in self._archive_directories())
        candidates += relative_candidates(recorded, self._archive_directories())
        return list(dict.fromkeys(candidates))

    def _resolve_vectors_paths(self, vectors_path: Optional[str]) -> Dict[str, str]:
        """Dotted config key -> the existing file to use, for every `vectors_path` in the config."""
        recorded_paths = dict(find_keys(self.config, VECTORS_PATH_KEY))
        input_keys = set()
        if self.input_kind == FASTTEXT_INPUT:
            reader_key = f"dataset_reader.token_indexers.{self.input_key}.{VECTORS_PATH_KEY}"
            input_keys = {reader_key, self._embedder_vectors_key}
            missing_keys = input_keys - set(recorded_paths)
            if missing_keys:
                raise self._error(f"has no {sorted(missing_keys)}")
        elif vectors_path is not None:
            raise self._error(f"has {self.input_kind} input ({self._embedder_key}): vectors_path does not apply")
        if vectors_path is not None and not Path(vectors_path).expanduser().is_file():
            raise ConfigurationError(f"fastText model {vectors_path} (vectors_path) does not exist")
        input_recorded = recorded_paths.get(self._embedder_vectors_key)
        resolved: Dict[str, str] = {}
        for key, recorded in recorded_paths.items():
            if vectors_path is not None and (key in input_keys or recorded == input_recorded):
                resolved[key] = str(Path(vectors_path).expanduser())
                continue
            candidates = self._candidates(str(recorded))
            found = next((path for path in candidates if path.is_file()), None)
            if found is None:
                looked = ", ".join(str(path) for path in candidates[1:])
                raise self._error(
                    f"needs the fastText model {recorded} ({key}), which does not exist; also looked "
                    f"for {looked}. Copy the .bin next to the archive or give it as `vectors_path`"
                )
            if found != Path(str(recorded)):
                logger.info("ELMo-C archive %s: using %s for %s", self.archive_file, found, key)
            resolved[key] = str(found)
        return resolved

    @property
    def num_layers(self) -> int:
        """Layers of representations: the projected input plus every LSTM layer."""
        return int(self.config["model"]["contextualizer"].get("num_layers", 2)) + 1

    @property
    def output_dim(self) -> int:
        """`2 * projection_dim`: `[forward; backward]`."""
        return 2 * int(self.config["model"]["contextualizer"]["projection_dim"])

    def load_model(self, cuda_device: int = -1, allow_different_vectors: bool = False):
        """
        The biLM and its dataset reader, with the resolved fastText paths. The vectors must be
        those the biLM was trained with (their fingerprint) unless `allow_different_vectors`.
        """
        overrides: Dict[str, Any] = dict(self.vectors_overrides)
        if allow_different_vectors and self.input_kind == FASTTEXT_INPUT:
            embedders = "model.text_field_embedder.token_embedders"
            overrides[f"{embedders}.{self.input_key}.allow_different_vectors"] = True
        try:
            archive = load_archive(
                str(self.extracted.directory), cuda_device=cuda_device, overrides=overrides
            )
        except BaseException:
            self.extracted.release()
            raise
        return archive.model, archive.dataset_reader


def folder_and_parent(folder: Union[str, os.PathLike]) -> List[Path]:
    folder = Path(folder).resolve()
    return [folder, folder.parent]


def relative_candidates(recorded: str, directories: List[Path]) -> List[Path]:
    """The last one, two and three components of `recorded` under each of `directories`."""
    recorded_path = Path(recorded).expanduser()
    parts = recorded_path.parts[1:] if recorded_path.is_absolute() else recorded_path.parts
    return list(dict.fromkeys(
        directory.joinpath(*parts[-count:])
        for count in range(1, min(_MAX_RELATIVE_COMPONENTS, len(parts)) + 1)
        for directory in directories
    ))


def same_fasttext_model(first: Union[str, os.PathLike], second: Union[str, os.PathLike]) -> bool:
    """Whether two paths hold the same fastText model (the same file, or identical copies)."""
    try:
        if os.path.samefile(first, second):
            return True
    except OSError:
        return False
    return FastTextVectors.from_path(first).fingerprint == FastTextVectors.from_path(second).fingerprint


def different_fasttext_error(
    archive_file: str, archive_vectors: str, given_vectors: str, config_key: str
) -> ConfigurationError:
    return ConfigurationError(
        f"fastText model {given_vectors} ({config_key}) is not the one ELMo-C archive "
        f"{archive_file} was pretrained with ({archive_vectors}): the biLM lives in the vector "
        "space of its own fastText model. Leave the option out, or give a copy of that file."
    )


def archive_with_its_fasttext(
    archive_file: Union[str, os.PathLike],
    vectors_path: Optional[str] = None,
    config_key: str = "vectors_path",
) -> ElmocArchive:
    """
    The `ElmocArchive` of a fastText-input biLM with the fastText model it was pretrained with.
    `vectors_path`, if given, must be that model (or a copy); if the archive's own model is not
    on this machine, it is accepted with a warning.
    """
    archive_file = str(archive_file)
    given = ElmocArchive(archive_file, vectors_path)
    if given.input_kind != FASTTEXT_INPUT:
        raise ConfigurationError(
            f"biLM archive {archive_file} has {given.input_kind} input (model.text_field_embedder."
            f"token_embedders.{given.input_key}): fine-tuning needs a fastText-input biLM"
        )
    if vectors_path is None:
        return given
    try:
        own = ElmocArchive(archive_file)
    except ConfigurationError as error:
        logger.warning("%s: its own fastText model is missing (%s); using %s", archive_file, error, vectors_path)
        return given
    if not same_fasttext_model(own.input_vectors_path, vectors_path):
        raise different_fasttext_error(archive_file, own.input_vectors_path, vectors_path, config_key)
    return given
