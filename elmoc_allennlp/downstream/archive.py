"""
`BilmArchive`: a trained biLM archive as the downstream components use it, opened once per
process. It is read from the archive's `config.json` without the weights (the biLM model is
recognised by its registered name, so nothing here imports it), and `load()` builds the biLM
from a `model.tar.gz` or from the copy a downstream archive carries.

The copy: at training, the biLM's `config.json` (fastText paths made absolute) and vocabulary are
written to `elmoc_bilm/<key>/` in the serialization directory, so in the downstream archive, which
then loads without the biLM archive (the downstream weights hold the biLM's). The fastText `.bin`
of the biLM is found by the rule of `common/fasttext_location.py`; the option `vectors_path` and
`ELMOC_VECTORS_PATH` override it.
"""
import contextlib
import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path

from elmoc_allennlp.common.archives import (
    CARRIED_DIRECTORY,
    CONFIG_NAME,
    extracted_from,
    find_keys,
    read_archive,
    register_carried_copies,
)
from elmoc_allennlp.common.fasttext_location import (
    VECTORS_PATH_VARIABLE,
    archive_directories,
    fasttext_candidates,
    folder_and_parent,
    read_locations,
    vectors_path_override,
)
from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import DEFAULT_END_TOKEN, DEFAULT_START_TOKEN
from elmoc_allennlp.downstream.input_kinds import VECTORS_PATH_KEY, find_input_kind
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import returns_all_layers

logger = logging.getLogger(__name__)

# The registered name of the biLM `Model` (`BidirectionalLanguageModel`).
BILM_MODEL_TYPE = "elmoc_bilm"
_VOCABULARY_NAME = "vocabulary"

PathLike = Union[str, os.PathLike]


def _registered_class(base: type, name: Any) -> Optional[type]:
    """The class `name` resolves to under the registrable `base`, or `None`."""
    if not isinstance(name, str):
        return None
    try:
        return base.resolve_class_name(name)[0]
    except ConfigurationError:
        return None


def carried_bilm_directory(serialization_dir: PathLike, archive_file: PathLike) -> Path:
    """Where the copy of the biLM named `archive_file` in a config is carried."""
    key = hashlib.sha256(os.fspath(archive_file).encode("utf-8")).hexdigest()[:16]
    return Path(serialization_dir) / CARRIED_DIRECTORY / key


# Loading a stranger's archive accepts an `archive_file` only where the archive carries its copy.
register_carried_copies(carried_bilm_directory)


class BilmArchive:
    """
    What a downstream user needs to know about a biLM archive, read from its `config.json`: the
    text field key and kind of its input (`input_key`, `input_kind`, see `input_kinds`), its
    boundary tokens and, for fastText input, where its fastText model is on this machine.
    Components get theirs from `BilmArchive.open`, which opens each archive once per process.

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory, or a URL).
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, overriding the path in the archive.
    serialization_dir : `str`, optional (default = `None`)
        A downstream run's folder (a loaded downstream archive's): the biLM's copy carried there
        is read instead of `archive_file`, if there is one.
    """

    def __init__(
        self,
        archive_file: PathLike,
        vectors_path: Optional[str] = None,
        serialization_dir: Optional[PathLike] = None,
    ) -> None:
        self.archive_file = os.fspath(archive_file)
        carried = carried_bilm_directory(serialization_dir, archive_file) if serialization_dir else None
        self.carried = carried is not None and (carried / CONFIG_NAME).is_file()
        if self.carried:
            self.local_path = carried
            self._directories = archive_directories(serialization_dir)
            given = vectors_path and Path(vectors_path).expanduser().is_file()
            vectors_path = vectors_path_override(str(Path(vectors_path).expanduser().resolve()) if given else None)
        else:
            try:
                self.local_path = Path(cached_path(self.archive_file))
            except FileNotFoundError:
                where = f"relative to the working directory, {Path.cwd()}"
                raise self._error(f"(archive_file) does not exist ({where})") from None
            self._directories = folder_and_parent(
                self.local_path if self.local_path.is_dir() else self.local_path.parent
            )
            vectors_path = vectors_path_override(vectors_path)
        try:
            with read_archive(self.local_path, self.archive_file) as extracted:  # removed after the block
                self.config = extracted.config
                self._locations = read_locations(extracted.directory)
                self._describe(vectors_path)
        except ConfigurationError as error:
            if not self.carried:
                raise
            origin = extracted_from(serialization_dir) or os.fspath(serialization_dir)
            raise ConfigurationError(
                f"The downstream model {origin} carries the config of its ELMo-C biLM "
                f"{self.archive_file} (archive_file), which it could not use: {error}. Copy the "
                f"fastText .bin next to the downstream archive or set {VECTORS_PATH_VARIABLE}."
            ) from None

    def _describe(self, vectors_path: Optional[str]) -> None:
        self._check_model()
        try:
            self.input_key, self.input_kind = find_input_kind(self.config)
        except ConfigurationError as error:
            raise ConfigurationError(f"biLM archive {self.archive_file}: {error}") from None
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
        self.input_vectors_path: Optional[str] = self.input_kind.input_vectors(self)
        self._pieces: Dict[str, Dict[str, int]] = {}

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
        if not returns_all_layers(_registered_class(Seq2SeqEncoder, encoder_type)):
            raise self._error(f"has model.contextualizer {encoder_type!r}, not one returning all layers")
        if "projection_dim" not in contextualizer:
            raise self._error("has no model.contextualizer.projection_dim")

    def _resolve_vectors_paths(self, vectors_path: Optional[str]) -> Dict[str, str]:
        """Dotted config key -> the existing file to use, for every `vectors_path` in the config."""
        recorded_paths = dict(find_keys(self.config, VECTORS_PATH_KEY))
        input_keys = self.input_kind.vectors_keys(self.input_key)
        missing_keys = input_keys - set(recorded_paths)
        if missing_keys:
            raise self._error(f"has no {sorted(missing_keys)}")
        if not input_keys and vectors_path is not None:
            raise self._error(f"has {self.input_kind.name} input ({self._embedder_key}): vectors_path does not apply")
        if vectors_path is not None and not Path(vectors_path).expanduser().is_file():
            raise ConfigurationError(f"fastText model {vectors_path} (vectors_path) does not exist")
        input_recorded = recorded_paths.get(self._embedder_vectors_key)
        resolved: Dict[str, str] = {}
        for key, recorded in recorded_paths.items():
            if vectors_path is not None and (key in input_keys or recorded == input_recorded):
                resolved[key] = str(Path(vectors_path).expanduser())
                continue
            candidates = fasttext_candidates(str(recorded), self._directories, self._locations.get(recorded))
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

    def vocabulary_namespace(self, namespace: str) -> Dict[str, int]:
        """token -> id of the archive's vocabulary namespace (a padded namespace: ids from 1)."""
        if namespace not in self._pieces:
            name = f"{_VOCABULARY_NAME}/{namespace}.txt"
            with read_archive(self.local_path, self.archive_file) as extracted:  # removed after the block
                path = extracted.member(name)
                if path is None:
                    raise self._error(f"has no {name} ({self._embedder_key}.vocab_namespace)")
                pieces = path.read_bytes().decode("utf-8").split("\n")
            if pieces and pieces[-1] == "":
                pieces.pop()
            self._pieces[namespace] = {piece: index + 1 for index, piece in enumerate(pieces)}
        return self._pieces[namespace]

    def resolved_config(self) -> Dict[str, Any]:
        """The archive's config with the absolute paths of the fastText files found on this machine."""
        config = copy.deepcopy(self.config)
        for key, path in self.vectors_overrides.items():
            set_dotted(config, key, str(Path(path).resolve()))
        return config

    def load(self, cuda_device: int = -1, allow_different_vectors: bool = False) -> Tuple[Any, Any]:
        """
        `(biLM model, biLM dataset reader)`, with the fastText files found on this machine. The
        vectors must be those the biLM was trained with (their fingerprint) unless
        `allow_different_vectors`. A carried copy is built without weights: the downstream
        weights hold them.
        """
        from allennlp.common.params import remove_keys_from_params
        from allennlp.data import DatasetReader, Vocabulary
        from allennlp.models import Model
        from allennlp.models.archival import load_archive

        overrides: Dict[str, Any] = dict(self.vectors_overrides)
        if allow_different_vectors and self.input_vectors_path is not None:
            overrides[f"{self._embedder_key}.allow_different_vectors"] = True
        with read_archive(self.local_path, self.archive_file) as extracted:  # removed after the block
            if not self.carried:
                archive = load_archive(str(extracted.directory), cuda_device=cuda_device, overrides=overrides)
                return archive.model, archive.dataset_reader
            config = copy.deepcopy(self.config)
            for key, value in overrides.items():
                set_dotted(config, key, value)
            params = Params(config)
            vocabulary_params = params.pop("vocabulary", Params({}))
            vocabulary_type = vocabulary_params.pop_choice("type", Vocabulary.list_available(), True)
            vocabulary_class, _ = Vocabulary.resolve_class_name(vocabulary_type)
            vocabulary = vocabulary_class.from_files(
                extracted.directory / _VOCABULARY_NAME,
                vocabulary_params.get("padding_token"),
                vocabulary_params.get("oov_token"),
            )
        model_params = params.pop("model")
        remove_keys_from_params(model_params)
        model = Model.from_params(vocab=vocabulary, params=model_params)
        reader = DatasetReader.from_params(params.pop("dataset_reader"))
        if cuda_device >= 0:
            model.cuda(cuda_device)
        return model, reader

    def carry(self, serialization_dir: PathLike, vocabulary) -> Path:
        """
        Writes the copy of this biLM (config with absolute fastText paths, vocabulary,
        `origin.json`) to `<serialization_dir>/elmoc_bilm/<key>`, atomically, once.
        """
        directory = carried_bilm_directory(serialization_dir, self.archive_file)
        if (directory / CONFIG_NAME).is_file():
            return directory
        input_vectors = self.input_vectors_path
        directory.parent.mkdir(parents=True, exist_ok=True)
        # A folder of its own: the workers of a distributed run may all be writing the same copy.
        partial = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            config = json.dumps(self.resolved_config(), indent=2)
            (partial / CONFIG_NAME).write_text(config, encoding="utf-8")
            vocabulary.save_to_files(str(partial / _VOCABULARY_NAME))
            origin = {
                "archive_file": self.archive_file,
                "resolved_archive_file": str(Path(self.local_path).resolve()),
                "vectors_path": str(Path(input_vectors).resolve()) if input_vectors else None,
            }
            (partial / "origin.json").write_text(json.dumps(origin, indent=2), encoding="utf-8")
            try:
                os.replace(partial, directory)
            except OSError:
                if not (directory / CONFIG_NAME).is_file():
                    raise
                shutil.rmtree(partial, ignore_errors=True)  # another worker wrote it first
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        logger.info("Carrying the config of ELMo-C biLM %s in %s", self.archive_file, directory)
        return directory

    # ------------------------------------------------------------------ once per process
    _opened: Dict[Tuple, "BilmArchive"] = {}

    @classmethod
    def open(
        cls,
        archive_file: PathLike,
        vectors_path: Optional[str] = None,
        serialization_dir: Optional[PathLike] = None,
    ) -> "BilmArchive":
        """
        The `BilmArchive` of these arguments, described once per process (again if the archive
        file changed or a fastText file it found went away).
        """
        def identity(path: PathLike) -> Tuple:
            try:
                status = os.stat(path)
            except OSError:
                return (os.fspath(path),)
            return (os.path.realpath(path), status.st_ino, status.st_size, status.st_mtime_ns)

        source: PathLike = os.fspath(archive_file)
        if serialization_dir is not None:
            carried = carried_bilm_directory(serialization_dir, archive_file) / CONFIG_NAME
            source = carried if carried.is_file() else source
        key = (
            identity(source),
            os.fspath(archive_file),
            vectors_path,
            os.fspath(serialization_dir) if serialization_dir is not None else None,
            os.environ.get(VECTORS_PATH_VARIABLE),
        )
        opened = cls._opened.get(key)
        if opened is None or not all(Path(path).is_file() for path in opened.vectors_overrides.values()):
            opened = cls._opened[key] = BilmArchive(archive_file, vectors_path, serialization_dir)
        return opened

    def open_for_training(self, serialization_dir: Optional[PathLike], allow_different_vectors: bool = False):
        """`(model, reader)`; at training (`serialization_dir` given, no copy yet) the copy is written there."""
        model, reader = self.load(allow_different_vectors=allow_different_vectors)
        if serialization_dir is not None and not self.carried:
            self.carry(serialization_dir, model.vocab)
        return model, reader


def set_dotted(config: Dict[str, Any], dotted_key: str, value: Any) -> None:
    """Sets `config[a][b][c] = value` for `dotted_key` "a.b.c" (a numeric part indexes a list)."""
    *parents, last = dotted_key.split(".")
    node: Any = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


@contextlib.contextmanager
def naming_the_config_key(params: Params) -> Iterator[None]:
    """Turns "(archive_file)" in a block's `ConfigurationError`s into the full config key."""
    history = params.history
    try:
        yield
    except ConfigurationError as error:
        message = str(error)
        if not history or "(archive_file)" not in message or history in message:
            raise
        raise ConfigurationError(message.replace("(archive_file)", f"({history}archive_file)")) from None


def with_carried_bilms(serialization_dir: PathLike, include_in_archive: Optional[List[str]]) -> Optional[List[str]]:
    """`include_in_archive` plus the `elmoc_bilm` folder, if the run has one."""
    if not (Path(serialization_dir) / CARRIED_DIRECTORY).is_dir():
        return include_in_archive
    patterns = list(include_in_archive or [])
    if CARRIED_DIRECTORY not in patterns:
        patterns.append(CARRIED_DIRECTORY)
    return patterns
