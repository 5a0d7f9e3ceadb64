"""
What a downstream user needs to know about a trained ELMo-C biLM archive, read from its
`config.json` without loading the weights (`ElmocArchive`): the text field key and boundary tokens
of its fastText input, and where the fastText model it needs is on this machine. Both the
`elmoc_bilm_inputs` indexer (data) and the biLM wrapper `ElmocBiLm` (modules) use it; the biLM
itself is loaded through allennlp's `load_archive` and recognised by its registered name, so
nothing here imports the model.
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
# Defaults of `LanguageModelCorpusReader` and `FastTextSubwordIndexer`.
DEFAULT_START_TOKEN = "<S>"
DEFAULT_END_TOKEN = "</S>"
DEFAULT_BOUNDARY_TOKENS = ["<S>", "</S>"]
# How many trailing components of a recorded vectors path are tried relative to the archive.
_MAX_RELATIVE_COMPONENTS = 3


class ElmocArchive:
    """
    What a downstream user needs to know about a biLM archive, read from its `config.json`
    without loading the weights: the text field key and kind of its input (`input_key`,
    `input_kind`: fastText for ELMo-C, characters for ELMo, BPE pieces for ELMo-Sub; see
    `elmoc_allennlp.common.bilm_inputs`), the sentence boundary tokens it was pretrained with,
    and, for fastText input, where the fastText model it needs is on this machine.

    The fastText `.bin` is not inside the archive: the archive's config records its path (at
    `dataset_reader.token_indexers.<key>.vectors_path` and
    `model.text_field_embedder.token_embedders.<key>.vectors_path`). That path is used if it
    exists. Otherwise the file is looked for relative to the archive, so that an archive moved
    to another machine together with its vectors still works: the recorded path's last one,
    two and three components under the archive's directory and under its parent (e.g.
    `runs/elmoc/model.tar.gz` finds `runs/elmoc/crawl-300d-2M-subword.bin` or
    `runs/fasttext/crawl-300d-2M-subword.bin`). `vectors_path` overrides all of this. A file
    that cannot be found raises a `ConfigurationError` naming it, the archive's config key and
    the `vectors_path` option.

    Use `ElmocArchive.read`, which also rejects archives that are not ELMo-C biLMs with a
    `ConfigurationError` naming the offending config key.

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
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file} (archive_file) does not exist (a relative "
                f"path resolves against the working directory, {os.getcwd()})"
            ) from None
        self.config = self._read_config()
        try:
            self._describe(vectors_path)
        except BaseException:
            self.extracted.release()  # nothing of a refused archive stays in the temp folder
            raise

    def _describe(self, vectors_path: Optional[str]) -> None:
        self._check_model_type()
        # The text field key of the biLM's input and its kind (fastText, characters or pieces).
        self.input_key, self.input_kind = find_bilm_input(self.archive_file, self.config)
        reader = self.config.get("dataset_reader", {})
        indexer = reader.get("token_indexers", {}).get(self.input_key, {})
        self.boundary_tokens: List[str] = list(
            indexer.get("boundary_tokens", DEFAULT_BOUNDARY_TOKENS)
        )
        # Whether pretraining lowercased tokens (`elmoc_fasttext_subwords`'s lowercase_tokens).
        self.lowercase_tokens = bool(indexer.get("lowercase_tokens", False))
        # Pretraining may have truncated long tokens (`elmoc_lm_corpus`'s max_token_characters).
        self.max_token_characters: Optional[int] = reader.get("max_token_characters")
        self.start_token = reader.get("start_token", DEFAULT_START_TOKEN)
        self.end_token = reader.get("end_token", DEFAULT_END_TOKEN)
        if not self.start_token or not self.end_token:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file} was pretrained without sentence boundary "
                f"tokens (dataset_reader.start_token={self.start_token!r}, "
                f"dataset_reader.end_token={self.end_token!r}); ELMo-C representations are "
                "computed with the boundaries the biLM was trained with"
            )
        self.vectors_overrides = self._resolve_vectors_paths(vectors_path)
        # The fastText model of a fastText-input biLM (None for other inputs).
        self.input_vectors_path: Optional[str] = None
        if self.input_kind == FASTTEXT_INPUT:
            self.input_vectors_path = self.vectors_overrides[
                f"model.text_field_embedder.token_embedders.{self.input_key}.{VECTORS_PATH_KEY}"
            ]
            self._check_vectors_dim()

    @classmethod
    def read(
        cls, archive_file: Union[str, os.PathLike], vectors_path: Optional[str] = None
    ) -> "ElmocArchive":
        return cls(archive_file, vectors_path)

    # ------------------------------------------------------------------ config

    def _read_config(self) -> Dict[str, Any]:
        # Extracted once per process and checked (`elmoc_allennlp.common.archives`).
        self.extracted = read_archive(self.local_path, self.archive_file)
        return self.extracted.config

    def _check_model_type(self) -> None:
        from allennlp.models import Model

        model_type = self.config["model"].get("type")
        model_class = None
        if isinstance(model_type, str):
            try:
                model_class, _ = Model.resolve_class_name(model_type)
            except ConfigurationError:
                model_class = None
        # The biLM class by its registered name: this layer does not import the model.
        bilm_class, _ = Model.resolve_class_name(BILM_MODEL_TYPE)
        is_bilm = isinstance(model_class, type) and issubclass(model_class, bilm_class)
        if not is_bilm:
            raise ConfigurationError(
                f"{self.archive_file} (archive_file) is not an ELMo-C biLM archive: its "
                f"model.type is {model_type!r}, expected 'elmoc_bilm' (a "
                "BidirectionalLanguageModel, pretrained with training_configs/pretrain/)"
            )
        directions = self.config["model"].get("directions", "both")
        if directions != "both":
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file} trained only the {directions} language model "
                f"(model.directions = {directions!r}); merge it with the other direction's "
                "archive first (`allennlp elmoc-merge-bilm`)"
            )
        from allennlp.modules import Seq2SeqEncoder

        contextualizer = self.config["model"].get("contextualizer")
        encoder_type = contextualizer.get("type") if isinstance(contextualizer, dict) else None
        try:
            encoder_class = (
                Seq2SeqEncoder.resolve_class_name(encoder_type)[0] if encoder_type else None
            )
        except ConfigurationError:
            encoder_class = None
        if encoder_class is None or not hasattr(encoder_class, "forward_all_layers"):
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file}: model.contextualizer is {encoder_type!r}, "
                "which cannot return all of its layers; expected 'elmoc_lstm'"
            )
        if "projection_dim" not in contextualizer:
            raise ConfigurationError(
                f"ELMo-C archive {self.archive_file}: model.contextualizer has no projection_dim"
            )

    # ------------------------------------------------------------------ fastText paths

    def _archive_directories(self) -> List[Path]:
        directory = self.local_path if self.local_path.is_dir() else self.local_path.parent
        directory = directory.resolve()
        return [directory, directory.parent]

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
        if self.input_kind != FASTTEXT_INPUT:
            if vectors_path is not None:
                raise ConfigurationError(
                    f"biLM archive {self.archive_file} has {self.input_kind} input (model."
                    f"text_field_embedder.token_embedders.{self.input_key}), not fastText: "
                    f"vectors_path ({vectors_path}) does not apply to it"
                )
            input_keys: set = set()
            input_recorded = None
        else:
            input_keys = {
                f"dataset_reader.token_indexers.{self.input_key}.{VECTORS_PATH_KEY}",
                f"model.text_field_embedder.token_embedders.{self.input_key}.{VECTORS_PATH_KEY}",
            }
            missing_keys = input_keys - set(recorded_paths)
            if missing_keys:
                raise ConfigurationError(
                    f"ELMo-C archive {self.archive_file}: its config has no {sorted(missing_keys)}"
                )
            input_recorded = recorded_paths[
                f"model.text_field_embedder.token_embedders.{self.input_key}.{VECTORS_PATH_KEY}"
            ]
        if vectors_path is not None and not Path(vectors_path).expanduser().is_file():
            raise ConfigurationError(
                f"fastText model {vectors_path} (vectors_path) does not exist"
            )
        resolved: Dict[str, str] = {}
        for key, recorded in recorded_paths.items():
            if vectors_path is not None and (key in input_keys or recorded == input_recorded):
                resolved[key] = str(Path(vectors_path).expanduser())
                continue
            candidates = self._candidates(str(recorded))
            found = next((path for path in candidates if path.is_file()), None)
            if found is None:
                looked = ", ".join(str(path) for path in candidates[1:])
                raise ConfigurationError(
                    f"ELMo-C archive {self.archive_file} needs the fastText model {recorded} (its "
                    f"config key {key}), which does not exist on this machine; also looked for "
                    f"it relative to the archive: {looked}. Copy the .bin next to the archive "
                    "or give its path as `vectors_path` (of the `elmoc_bilm_inputs` indexer and "
                    "the `elmoc_token_embedder`, or --vectors-path of `allennlp elmoc-embed`)"
                )
            if found != Path(str(recorded)):
                logger.info("ELMo-C archive %s: using %s for %s", self.archive_file, found, key)
            resolved[key] = str(found)
        return resolved

    def _check_vectors_dim(self) -> None:
        contextualizer = self.config["model"]["contextualizer"]
        expected = contextualizer.get("input_dim")
        vectors = FastTextVectors.from_path(self.input_vectors_path)
        if expected is not None and vectors.dim != expected:
            raise ConfigurationError(
                f"fastText model {self.input_vectors_path} has dimension {vectors.dim}, but the "
                f"ELMo-C archive {self.archive_file} was pretrained on {expected}-dimensional "
                "vectors (model.contextualizer.input_dim): wrong vectors_path?"
            )

    # ------------------------------------------------------------------ properties

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
        Loads the biLM (a `BidirectionalLanguageModel`) with the resolved fastText paths. The
        vectors must be those the biLM was trained with (their fingerprint, recorded in the
        weights) unless `allow_different_vectors`.
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
    first, second = Path(first), Path(second)
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
    own_kind = ElmocArchive.read(archive_file) if vectors_path is None else None
    if own_kind is not None:
        if own_kind.input_kind != FASTTEXT_INPUT:
            raise ConfigurationError(
                f"biLM archive {archive_file} has {own_kind.input_kind} input (model."
                f"text_field_embedder.token_embedders.{own_kind.input_key}): fine-tuning "
                "continues ELMo-C pretraining and needs a fastText-input biLM"
            )
        return own_kind
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
