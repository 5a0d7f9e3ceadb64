"""
What a downstream model trained with ELMo-C carries, so that its `model.tar.gz` loads anywhere:
the biLM's `config.json` and vocabulary, copied at training to `elmoc_bilm/<key>/` in the
serialization directory (and so in the archive). Loading builds the biLM from that copy, without
the biLM archive. Its fastText `.bin` is, in this order: `ELMOC_VECTORS_PATH`, the option
`vectors_path` if it exists, the path recorded at training, and the last one to three components
of that path under the downstream archive's folder and its parent.
"""
import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.common.params import remove_keys_from_params
from allennlp.models.archival import CONFIG_NAME

from elmoc_allennlp.common.archives import extracted_from
from elmoc_allennlp.common.config_keys import set_dotted
from elmoc_allennlp.common.elmoc_archive import ElmocArchive, folder_and_parent, relative_candidates

logger = logging.getLogger(__name__)

# The folder of a serialization directory (and so of `model.tar.gz`) holding the biLM copies.
CARRIED_DIRECTORY = "elmoc_bilm"
# The one override of the biLM's fastText `.bin`.
VECTORS_PATH_VARIABLE = "ELMOC_VECTORS_PATH"
_VOCABULARY_NAME = "vocabulary"


def carried_bilm_directory(
    serialization_dir: Union[str, os.PathLike], archive_file: Union[str, os.PathLike]
) -> Path:
    """Where the copy of the biLM named `archive_file` in a config is carried."""
    key = hashlib.sha256(os.fspath(archive_file).encode("utf-8")).hexdigest()[:16]
    return Path(serialization_dir) / CARRIED_DIRECTORY / key


def vectors_path_override(vectors_path: Optional[str]) -> Optional[str]:
    """`ELMOC_VECTORS_PATH` if set (it must exist), else `vectors_path`."""
    variable = os.environ.get(VECTORS_PATH_VARIABLE)
    if not variable:
        return vectors_path
    if not Path(variable).expanduser().is_file():
        raise ConfigurationError(
            f"fastText model {variable} (environment variable {VECTORS_PATH_VARIABLE}) does not exist"
        )
    return str(Path(variable).expanduser().resolve())


class CarriedElmocArchive(ElmocArchive):
    """
    The `ElmocArchive` of a biLM copy carried in a downstream archive. `load_model` builds the
    biLM without weights: the downstream weights hold them.

    # Parameters

    directory : `Path`
        The copy: `<serialization dir>/elmoc_bilm/<key>`.
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin`, overriding the recorded one.
    search_directories : `List[Path]`
        Where a `.bin` missing at its recorded path is looked for.
    """

    def __init__(
        self, directory: Path, vectors_path: Optional[str], search_directories: List[Path]
    ) -> None:
        self._search_directories = list(search_directories)
        super().__init__(directory, vectors_path)

    def _archive_directories(self) -> List[Path]:
        return self._search_directories

    def load_model(self, cuda_device: int = -1, allow_different_vectors: bool = False):
        from allennlp.data import DatasetReader, Vocabulary
        from allennlp.models import Model

        config = copy.deepcopy(self.config)
        for key, path in self.vectors_overrides.items():
            set_dotted(config, key, path)
        if allow_different_vectors:
            embedders = config["model"]["text_field_embedder"]["token_embedders"]
            embedders[self.input_key]["allow_different_vectors"] = True
        params = Params(config)
        vocabulary_params = params.pop("vocabulary", Params({}))
        vocabulary_type = vocabulary_params.pop_choice("type", Vocabulary.list_available(), True)
        vocabulary_class, _ = Vocabulary.resolve_class_name(vocabulary_type)
        vocabulary = vocabulary_class.from_files(
            self.local_path / _VOCABULARY_NAME,
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


def _origin_directories(serialization_dir: Union[str, os.PathLike]) -> List[Path]:
    """The downstream archive's folder (or the serialization directory) and its parent."""
    origin = extracted_from(serialization_dir)
    return folder_and_parent(Path(origin).parent if origin else serialization_dir)


def locate_fasttext(
    vectors_path: str, serialization_dir: Optional[Union[str, os.PathLike]] = None
) -> str:
    """
    The fastText `.bin` of a task's own fastText component: `vectors_path` if it exists; else,
    in a loaded archive, as the biLM's is found (but `ELMOC_VECTORS_PATH` last).
    """
    if serialization_dir is None or Path(vectors_path).expanduser().is_file():
        return vectors_path
    for candidate in relative_candidates(vectors_path, _origin_directories(serialization_dir)):
        if candidate.is_file():
            logger.info("Using %s for the missing fastText model %s", candidate, vectors_path)
            return str(candidate)
    return vectors_path_override(None) or vectors_path


def read_bilm_archive(
    archive_file: Union[str, os.PathLike],
    vectors_path: Optional[str] = None,
    serialization_dir: Optional[Union[str, os.PathLike]] = None,
) -> ElmocArchive:
    """
    The `ElmocArchive` of the biLM named `archive_file` in a downstream config: its copy carried
    in `serialization_dir` if there is one (a loaded downstream archive), else the biLM archive.
    """
    carried = None
    if serialization_dir is not None:
        carried = carried_bilm_directory(serialization_dir, archive_file)
    if carried is None or not (carried / CONFIG_NAME).is_file():
        return ElmocArchive(archive_file, vectors_path_override(vectors_path))
    override = vectors_path_override(None)
    if override is None and vectors_path and Path(vectors_path).expanduser().is_file():
        override = str(Path(vectors_path).expanduser().resolve())
    try:
        return CarriedElmocArchive(carried, override, _origin_directories(serialization_dir))
    except ConfigurationError as error:
        origin = extracted_from(serialization_dir) or os.fspath(serialization_dir)
        raise ConfigurationError(
            f"The downstream model {origin} carries the config of its ELMo-C biLM "
            f"{os.fspath(archive_file)} (archive_file), which it could not use: {error}. Copy the "
            f"fastText .bin next to the downstream archive or set {VECTORS_PATH_VARIABLE}."
        ) from None


def open_bilm(
    archive_file: Union[str, os.PathLike],
    vectors_path: Optional[str] = None,
    serialization_dir: Optional[Union[str, os.PathLike]] = None,
    allow_different_vectors: bool = False,
) -> Tuple[ElmocArchive, Any, Any]:
    """
    `(archive, biLM model, biLM dataset reader)` for a downstream component. At training
    (`serialization_dir` given, no copy yet) the biLM's copy is written there.
    """
    archive = read_bilm_archive(archive_file, vectors_path, serialization_dir)
    model, reader = archive.load_model(allow_different_vectors=allow_different_vectors)
    if serialization_dir is not None and not isinstance(archive, CarriedElmocArchive):
        carry_bilm(serialization_dir, archive_file, archive, model.vocab)
    return archive, model, reader


def carry_bilm(
    serialization_dir: Union[str, os.PathLike],
    archive_file: Union[str, os.PathLike],
    archive: ElmocArchive,
    vocabulary,
) -> Path:
    """
    Writes the copy of the biLM `archive` (config with absolute fastText paths, vocabulary,
    `origin.json`) to `<serialization_dir>/elmoc_bilm/<key>`, atomically.
    """
    directory = carried_bilm_directory(serialization_dir, archive_file)
    if (directory / CONFIG_NAME).is_file():
        return directory
    config = copy.deepcopy(archive.config)
    for key, path in archive.vectors_overrides.items():
        set_dotted(config, key, str(Path(path).resolve()))
    input_vectors = archive.input_vectors_path
    directory.parent.mkdir(parents=True, exist_ok=True)
    # A folder of its own: the workers of a distributed run may all be writing the same copy.
    partial = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        (partial / CONFIG_NAME).write_text(json.dumps(config, indent=2), encoding="utf-8")
        vocabulary.save_to_files(str(partial / _VOCABULARY_NAME))
        origin = {
            "archive_file": os.fspath(archive_file),
            "resolved_archive_file": str(Path(archive.local_path).resolve()),
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
    logger.info("Carrying the config of ELMo-C biLM %s in %s", archive_file, directory)
    return directory


def with_carried_bilms(
    serialization_dir: Union[str, os.PathLike], include_in_archive: Optional[List[str]]
) -> Optional[List[str]]:
    """`include_in_archive` plus the `elmoc_bilm` folder, if the run has one."""
    if not (Path(serialization_dir) / CARRIED_DIRECTORY).is_dir():
        return include_in_archive
    patterns = list(include_in_archive or [])
    if CARRIED_DIRECTORY not in patterns:
        patterns.append(CARRIED_DIRECTORY)
    return patterns
