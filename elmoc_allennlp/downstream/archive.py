"""
`BilmArchive`: a trained biLM archive as downstream components use it, from its `model.tar.gz` or
the copy a downstream archive carries in `elmoc_bilm/<key>/`; fastText files as
`fasttext/location.py` finds them.
"""

import contextlib
import json
import logging
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from allennlp.common import Params
from allennlp.common.params import with_overrides
from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path

from elmoc_allennlp.common.archives import (
    CONFIG_NAME,
    archive_limit,
    carried_bilm_directory,
    extracted_from,
    extraction_limits,
    find_keys,
    read_archive,
    read_config,
)
from elmoc_allennlp.common.archives.extraction import _check_member
from elmoc_allennlp.common.archives.limits import _damage_named, _regular_file
from elmoc_allennlp.common.archives.zip_archives import refuse_zip
from elmoc_allennlp.common.archives.vocabulary import _VocabularyCount
from elmoc_allennlp.fasttext.location import (
    LOCATIONS_NAME,
    VECTORS_PATH_VARIABLE,
    PathLike,
    archive_directories,
    fasttext_candidates,
    folder_and_parent,
    read_locations,
    vectors_path_override,
)
from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import (
    DEFAULT_END_TOKEN,
    DEFAULT_START_TOKEN,
)
from elmoc_allennlp.downstream.input_kinds import (
    VECTORS_PATH_KEY,
    find_input_kind,
    registered_class,
)
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import returns_all_layers

logger = logging.getLogger(__name__)

_VOCABULARY_NAME = "vocabulary"


class BilmArchive:
    """
    What downstream use needs of a biLM archive's `config.json`: input key and kind, boundary tokens,
    fastText files on this machine. Components get theirs from `BilmArchive.open`, once per process.

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (or its serialization directory, or a URL).
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, overriding the path in the archive.
    serialization_dir : `str`, optional (default = `None`)
        A downstream run's folder: the biLM's copy carried there, if any, is read instead.
    """

    def __init__(
        self,
        archive_file: PathLike,
        vectors_path: Optional[str] = None,
        serialization_dir: Optional[PathLike] = None,
    ) -> None:
        self.archive_file = os.fspath(archive_file)
        carried = (
            carried_bilm_directory(serialization_dir, archive_file) if serialization_dir else None
        )
        self.carried = carried is not None and (carried / CONFIG_NAME).is_file()
        if self.carried:
            self.local_path = carried
            self._directories = archive_directories(serialization_dir)
            given = vectors_path and Path(vectors_path).expanduser().is_file()
            vectors_path = vectors_path_override(
                str(Path(vectors_path).expanduser().resolve()) if given else None
            )
        else:
            try:
                self.local_path = Path(cached_path(self.archive_file))
            except FileNotFoundError:
                where = f"relative to the working directory, {Path.cwd()}"
                raise self._error(f"(archive_file) does not exist ({where})") from None
            folder = self.local_path if self.local_path.is_dir() else self.local_path.parent
            self._directories = folder_and_parent(folder)
            vectors_path = vectors_path_override(vectors_path)
        try:
            with _members(self.local_path, CONFIG_NAME, LOCATIONS_NAME) as directory:
                self.config = read_config(directory, self.archive_file)
                self._locations = read_locations(directory)
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
        self.boundary_tokens: List[str] = list(
            indexer.get("boundary_tokens", [DEFAULT_START_TOKEN, DEFAULT_END_TOKEN])
        )
        # `None` (not recorded): pretraining followed the fastText model (resolved below).
        self.lowercase_tokens: Optional[bool] = indexer.get("lowercase_tokens")
        # Pretraining may have cut long tokens (`elmoc_lm_corpus`'s max_token_characters).
        self.max_token_characters: Optional[int] = reader.get("max_token_characters")
        self.start_token = reader.get("start_token", DEFAULT_START_TOKEN)
        self.end_token = reader.get("end_token", DEFAULT_END_TOKEN)
        if not self.start_token or not self.end_token:
            raise self._error("has no dataset_reader.start_token / end_token")
        self.vectors_overrides = self._resolve_vectors_paths(vectors_path)
        self.input_vectors_path: Optional[str] = self.input_kind.input_vectors(self)
        if self.lowercase_tokens is None:
            self.lowercase_tokens = self.input_kind.lowercased_input(self)
        self._pieces: Dict[str, Dict[str, int]] = {}

    def _error(self, problem: str) -> ConfigurationError:
        return ConfigurationError(f"ELMo-C archive {self.archive_file} {problem}")

    def _check_model(self) -> None:
        from allennlp.models import Model
        from allennlp.modules import Seq2SeqEncoder

        model = self.config["model"]
        model_class = registered_class(Model, model.get("type"))
        bilm_class = Model.resolve_class_name("elmoc_bilm")[0]
        if not (isinstance(model_class, type) and issubclass(model_class, bilm_class)):
            raise self._error(
                f"(archive_file) is not an ELMo-C biLM archive: model.type is {model.get('type')!r}"
            )
        directions = model.get("directions", "both")
        if directions != "both":
            raise self._error(
                f"has model.directions {directions!r}: merge it first (elmoc-merge-bilm)"
            )
        contextualizer = model.get("contextualizer")
        encoder_type = contextualizer.get("type") if isinstance(contextualizer, dict) else None
        if not returns_all_layers(registered_class(Seq2SeqEncoder, encoder_type)):
            raise self._error(
                f"has model.contextualizer {encoder_type!r}, not one returning all layers"
            )
        if "projection_dim" not in contextualizer:
            raise self._error("has no model.contextualizer.projection_dim")

    def _resolve_vectors_paths(self, vectors_path: Optional[str]) -> Dict[str, str]:
        """Dotted config key -> the existing file to use, for every `vectors_path` in the config."""
        recorded_paths = dict(find_keys(self.config, VECTORS_PATH_KEY))
        resolved = self.input_kind.given_vectors(self, recorded_paths, vectors_path)
        for key, recorded in recorded_paths.items():
            if key in resolved:
                continue
            candidates = fasttext_candidates(
                str(recorded), self._directories, self._locations.get(recorded)
            )
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
            with _members(self.local_path, name) as directory:
                path = _regular_file(directory, name, self.archive_file)
                if path is None:
                    embedder_key = f"model.text_field_embedder.token_embedders.{self.input_key}"
                    raise self._error(f"has no {name} ({embedder_key}.vocab_namespace)")
                pieces = path.read_bytes().decode("utf-8").split("\n")
            if pieces and pieces[-1] == "":
                pieces.pop()
            self._pieces[namespace] = {piece: index + 1 for index, piece in enumerate(pieces)}
        return self._pieces[namespace]

    def resolved_config(self) -> Dict[str, Any]:
        """The archive's config with the absolute paths of the fastText files found on this machine."""
        absolute = {key: str(Path(path).resolve()) for key, path in self.vectors_overrides.items()}
        return with_overrides(self.config, absolute)

    def load(self, allow_different_vectors: bool = False) -> Tuple[Any, Any]:
        """`(biLM model, dataset reader)` with the fastText files found here (a carried copy: without weights);
        the one extraction of a `.tar.gz`."""
        from allennlp.common.params import remove_keys_from_params
        from allennlp.data import DatasetReader, Vocabulary
        from allennlp.models import Model
        from allennlp.models.archival import load_archive

        overrides = {
            **self.vectors_overrides,
            **self.input_kind.load_overrides(self, allow_different_vectors),
        }
        with read_archive(
            self.local_path, self.archive_file
        ) as extracted:  # removed after the block
            if not self.carried:
                archive = load_archive(str(extracted.directory), overrides=overrides)
                return archive.model, archive.dataset_reader
            params = Params(with_overrides(self.config, overrides))
            # As allennlp's `Model._load` reads an archive's vocabulary.
            vocabulary_params = params.pop("vocabulary", Params({}))
            vocabulary_type = vocabulary_params.pop_choice(
                "type", Vocabulary.list_available(), True
            )
            vocabulary = Vocabulary.resolve_class_name(vocabulary_type)[0].from_files(
                extracted.directory / _VOCABULARY_NAME,
                vocabulary_params.get("padding_token"),
                vocabulary_params.get("oov_token"),
            )
        model_params = params.pop("model")
        remove_keys_from_params(model_params)
        model = Model.from_params(vocab=vocabulary, params=model_params)
        return model, DatasetReader.from_params(params.pop("dataset_reader"))

    def carry(self, serialization_dir: PathLike, vocabulary) -> Path:
        """Writes the copy of this biLM to `<serialization_dir>/elmoc_bilm/<key>`, atomically, once."""
        directory = carried_bilm_directory(serialization_dir, self.archive_file)
        if (directory / CONFIG_NAME).is_file():
            return directory
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
                "vectors_path": self.input_vectors_path
                and str(Path(self.input_vectors_path).resolve()),
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

    def open_for_training(
        self, serialization_dir: Optional[PathLike], allow_different_vectors: bool = False
    ):
        """`load()`; at training (`serialization_dir` given, no copy yet) the copy is written there."""
        model, reader = self.load(allow_different_vectors)
        if serialization_dir is not None and not self.carried:
            self.carry(serialization_dir, model.vocab)
        return model, reader

    _opened: Dict[Tuple, "BilmArchive"] = {}

    @classmethod
    def open(
        cls,
        archive_file: PathLike,
        vectors_path: Optional[str] = None,
        serialization_dir: Optional[PathLike] = None,
    ) -> "BilmArchive":
        """
        The `BilmArchive` of these arguments, once per process (again if its file changed or its
        .bin went away).
        """
        source: PathLike = os.fspath(archive_file)
        if serialization_dir is not None:
            carried = carried_bilm_directory(serialization_dir, archive_file) / CONFIG_NAME
            source = carried if carried.is_file() else source
        try:
            status = os.stat(source)
            identity: Tuple = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        except OSError:
            identity = (os.fspath(source),)
        key = (
            identity,
            os.fspath(archive_file),
            vectors_path,
            serialization_dir and os.fspath(serialization_dir),
            os.environ.get(VECTORS_PATH_VARIABLE),
        )
        opened = cls._opened.get(key)
        if opened is None or not all(
            Path(path).is_file() for path in opened.vectors_overrides.values()
        ):
            opened = cls._opened[key] = BilmArchive(archive_file, vectors_path, serialization_dir)
        return opened


@contextlib.contextmanager
def _members(archive_path: Path, *names: str) -> Iterator[Path]:
    """A folder with the archive's regular files `names` (those it has): its own, or for a `.tar.gz` a temporary
    one they are copied to in one reading of the tar, every member's header checked as extraction checks it
    (`_check_member`), nothing else written (no weights)."""
    if archive_path.is_dir():
        yield archive_path
        return
    path = str(archive_path)
    seen, totals, limits = (
        {},
        [0, 0, 0],
        extraction_limits(os.path.getsize(path)),
    )  # as `_check_member` takes them
    vocabulary = _VocabularyCount(
        path,
        archive_limit("ELMOC_ARCHIVE_MAX_VOCABULARY_LINES"),
        archive_limit("ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES"),
    )
    with tempfile.TemporaryDirectory(prefix="elmoc-members-") as folder:
        with _damage_named(path, "not a tar archive, or "), _open_tar_stream(path) as tar:
            for member in tar:
                name = _check_member(path, member, seen, totals, limits)
                if name in names and member.isfile():
                    target = Path(folder, *name.split("/"))
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with open(target, "xb") as out:
                        if name.endswith(".json"):
                            shutil.copyfileobj(tar.extractfile(member), out)
                        else:
                            vocabulary.copy(tar.extractfile(member), out, member.name)
                tar.members = []  # headers only: keep none of them in memory
        yield Path(folder)


def _open_tar_stream(path: str) -> tarfile.TarFile:
    """The `.tar.gz` at `path` read as a stream; a zip is named as one (`refuse_zip`), as extraction does."""
    try:
        return tarfile.open(path, "r|*")
    except tarfile.ReadError:
        refuse_zip(path)
        raise


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
        raise ConfigurationError(
            message.replace("(archive_file)", f"({history}archive_file)")
        ) from None


class NamingTheConfigKey:
    """Mixed into a registrable built from a biLM archive: errors about the archive name its config key."""

    @classmethod
    def from_params(
        cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras
    ):
        with naming_the_config_key(params):
            return super().from_params(  # type: ignore[misc]
                params,
                constructor_to_call=constructor_to_call,
                constructor_to_inspect=constructor_to_inspect,
                **extras,
            )
