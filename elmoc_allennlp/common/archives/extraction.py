"""`extract_archive`: only regular files and folders, each member checked from its header, then the weights
header, the configs and their parameter bound; `read_archive` shares one extraction per archive in use.
"""

import atexit
import contextlib
import logging
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives.config_policy import read_config
from elmoc_allennlp.common.archives.limits import (
    CONFIG_NAME,
    MAX_NAME_COMPONENT_BYTES,
    REGULAR_MEMBERS,
    CorruptArchiveError,
    UnsafeArchiveError,
    _LIMIT_NAMES,
    _SPECIAL_FILES,
    _damage_named,
    _regular_file,
    archive_limit,
    extraction_limits,
)
from elmoc_allennlp.common.archives.parameter_bound import config_parameter_bound
from elmoc_allennlp.common.archives.vocabulary import (
    _is_vocabulary,
    _VocabularyCount,
    check_carried_vocabularies,
)
from elmoc_allennlp.common.archives.weights_header import check_weights_file
from elmoc_allennlp.common.archives.zip_archives import refuse_zip
from elmoc_allennlp.common.disk_full import DiskFullError, find_disk_full

logger = logging.getLogger(__name__)


def _check_member(
    archive: str,
    member: tarfile.TarInfo,
    names: Dict[str, bool],
    totals: List[int],
    limits: Tuple[int, ...],
) -> str:
    """The member's normalised name, or `UnsafeArchiveError`. `names`: every name seen -> is a folder;
    `totals`: members, bytes and folders; `limits`: `extraction_limits`."""
    name = member.name
    if not name or "\0" in name:
        raise UnsafeArchiveError(archive, name, "has an empty or invalid name")
    if name.startswith("/") or os.path.isabs(name):
        raise UnsafeArchiveError(archive, name, "has an absolute name")
    if ".." in name.replace("\\", "/").split("/"):
        raise UnsafeArchiveError(archive, name, "has a '..' component")
    if member.issym() or member.islnk():
        kind = "symbolic link" if member.issym() else "hard link"
        raise UnsafeArchiveError(archive, name, f"is a {kind} (to {member.linkname!r})")
    if not (member.isfile() or member.isdir()):
        kind = _SPECIAL_FILES.get(member.type, f"a special file (tar type {member.type!r})")
        raise UnsafeArchiveError(archive, name, f"is {kind}")
    if member.issparse():
        raise UnsafeArchiveError(archive, name, "is a sparse file")
    components = name.count("/") + 1
    if components > limits[4]:
        raise UnsafeArchiveError(
            archive,
            name[:200],
            f"has {components:,} path components, past ELMOC_ARCHIVE_MAX_DEPTH ({limits[4]:,})",
        )
    parts = name.split("/")
    if any(
        len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_COMPONENT_BYTES for part in parts
    ):
        raise UnsafeArchiveError(
            archive, name[:1000], f"has a component longer than {MAX_NAME_COMPONENT_BYTES} bytes"
        )
    normalised = posixpath.normpath(name)
    if normalised == "." and member.isdir():
        return normalised
    if member.isdir() and normalised in REGULAR_MEMBERS:
        raise UnsafeArchiveError(archive, name, "is a folder, where a regular file is expected")
    if normalised == "." or (normalised in names and not (member.isdir() and names[normalised])):
        raise UnsafeArchiveError(archive, name, "appears twice in the archive")
    if member.isdir() and _is_vocabulary(posixpath.dirname(normalised)):
        # allennlp's `Vocabulary.from_files` reads every entry of the folder as a file.
        raise UnsafeArchiveError(
            archive, name, "is a folder inside vocabulary/, where files are expected"
        )
    parent = posixpath.dirname(normalised)
    while parent and names.get(parent) is not True:
        if parent in names or parent in REGULAR_MEMBERS:
            raise UnsafeArchiveError(archive, name, f"is inside {parent!r}, which is a file")
        names[parent] = True
        totals[2] += 1
        parent = posixpath.dirname(parent)
    if member.isdir() and names.get(normalised) is not True:
        totals[2] += 1
    names[normalised] = member.isdir()
    totals[0] += 1
    totals[1] += member.size if member.isfile() else 0
    json_bytes = member.size if normalised.endswith(".json") else 0
    for value, limit, what in zip(
        (totals[0], totals[1], json_bytes, totals[2]), limits, _LIMIT_NAMES
    ):
        if value > limit:
            raise UnsafeArchiveError(archive, name, f"makes {value:,} {what} ({limit:,})")
    return normalised


@contextlib.contextmanager
def _writing_named(archive: str, member: str, target: str) -> Iterator[None]:
    """Names the archive and the member in the file system's errors (a full disk, ...)."""
    try:
        yield
    except OSError as error:
        if error.errno is None or isinstance(error, DiskFullError):
            raise
        message = (
            f"{os.strerror(error.errno)} while extracting member {member!r} of model archive "
            f"{archive} to {target}; nothing of it was kept"
        )
        if find_disk_full(error) is not None:
            raise DiskFullError(error.errno, message + ". Free space, then run again.") from None
        raise OSError(error.errno, message) from None


def _extract_members(tar: tarfile.TarFile, archive: str, directory: str) -> None:
    names: Dict[str, bool] = {}
    totals = [0, 0, 0]
    limits = extraction_limits(os.path.getsize(archive))
    vocabulary = _VocabularyCount(
        archive,
        archive_limit("ELMOC_ARCHIVE_MAX_VOCABULARY_LINES"),
        archive_limit("ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES"),
    )
    members = iter(tar)
    while True:
        with _damage_named(archive):
            member = next(members, None)
        if member is None:
            break
        normalised = _check_member(archive, member, names, totals, limits)
        target = os.path.join(directory, *normalised.split("/"))
        with _writing_named(archive, member.name, target):
            os.makedirs(target if member.isdir() else os.path.dirname(target), exist_ok=True)
            if member.isfile():
                with _damage_named(archive, f"member {member.name!r} is "), open(
                    target, "xb"
                ) as out:
                    source = tar.extractfile(member)
                    if _is_vocabulary(posixpath.dirname(normalised)):
                        vocabulary.copy(source, out, member.name)
                    else:
                        shutil.copyfileobj(source, out, 1 << 20)
    # `tarfile` stops silently at a cut header: a tar ends with two zero blocks (a compressed one, its checksum).
    with _damage_named(archive):
        tar.fileobj.seek(tar.offset)
        marker = tar.fileobj.read(2 * tarfile.BLOCKSIZE)
        if len(marker) < 2 * tarfile.BLOCKSIZE or marker.count(0) != len(marker):
            raise CorruptArchiveError(
                archive, f"truncated or corrupt after {tar.offset:,} bytes of tar data"
            )
        while tar.fileobj.read(1 << 20):
            pass
    _check_contents(directory, archive, names, "weights.th")


def _check_contents(directory: str, archive: str, names: Dict[str, bool], weights: str) -> None:
    """A model's files in `directory` (`names`: each relative path, `True` for a folder): the
    config, the weights file `weights` and the vocabulary there, the metadata and configs as
    data, the weights from their headers, the configs' parameters within the weights' values,
    the carried vocabularies."""
    for required, is_folder in ((CONFIG_NAME, False), (weights, False), ("vocabulary/", True)):
        if names.get(required.rstrip("/")) is not is_folder:
            raise ConfigurationError(f"Model archive {archive} has no {required}")
    if "meta.json" in names:
        read_config(directory, archive, "meta.json")
    held = check_weights_file(os.path.join(directory, weights), archive, weights)
    # Every config (its own, and each carried biLM's) builds layers whose parameters the weights hold.
    implied, largest = 0, (0, "")
    for name in sorted(names):
        if names[name] or posixpath.basename(name) != CONFIG_NAME:
            continue
        config = read_config(directory, archive, name)
        bound, key = config_parameter_bound(config.get("model"), "model")
        implied += bound
        largest = max(largest, (bound, f"{name}: {key}"))
    if implied > held:
        raise ConfigurationError(
            f"Model archive {archive}: its configs imply at least {implied:,} parameters (most "
            f"from {largest[1]}), but weights.th holds {held:,} values; the config does not match "
            "its weights"
        )
    check_carried_vocabularies(archive, names)


def check_model_folder(directory: str, archive: str) -> None:
    """
    A serialization folder read as a model archive (`allennlp train`'s `-s` folder): checked as an
    extracted archive's contents are, before allennlp reads it, the weights file being the one
    allennlp loads (`weights.th`, else `best.th`). A folder may come from a stranger as a
    `.tar.gz` may: its weights are a pickle that torch 1.12 unpickles whole.
    """
    names: Dict[str, bool] = {}
    for root, folders, files in os.walk(directory):
        relative = os.path.relpath(root, directory)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        names.update({prefix + folder: True for folder in folders})
        names.update({prefix + file: False for file in files})
    weights = "weights.th" if names.get("weights.th") is False else "best.th"
    try:
        _check_contents(directory, archive, names, weights)
    except UnsafeArchiveError as error:
        raise UnsafeArchiveError(archive, error.member, error.reason, folder=True) from None


_EXTRACTED_FROM: Dict[str, str] = {}  # extraction folder -> its archive


def extract_archive(
    archive_path: Union[str, os.PathLike], directory: Optional[Union[str, os.PathLike]] = None
) -> str:
    """Extracts `archive_path`, checked, into `directory` (which must not exist) or a new temporary folder."""
    archive = os.fspath(archive_path)
    try:
        status = os.stat(archive)
    except OSError:
        raise ConfigurationError(f"Model archive {archive} does not exist") from None
    if not stat.S_ISREG(status.st_mode):
        kind = "a directory" if stat.S_ISDIR(status.st_mode) else "not a regular file"
        raise ConfigurationError(f"Model archive {archive} is {kind}, not a .tar.gz file")
    if status.st_size == 0:
        raise CorruptArchiveError(archive, "the file is empty")
    with _damage_named(archive, "not a tar archive, or "):
        try:
            tar = tarfile.open(archive, "r:*")
        except tarfile.ReadError:
            refuse_zip(archive)  # a zip is named as one
            raise
    with tar:
        if directory is None:
            directory = tempfile.mkdtemp(prefix="elmoc-archive-")
        else:
            os.makedirs(directory)
        directory = os.fspath(directory)
        logger.info("extracting archive file %s to %s", archive, directory)
        try:
            _extract_members(tar, archive, directory)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
    _EXTRACTED_FROM[os.path.realpath(directory)] = os.path.abspath(archive)
    return directory


def extracted_from(directory: Union[str, os.PathLike]) -> Optional[str]:
    """The archive extracted into `directory` by this module, if it was."""
    return _EXTRACTED_FROM.get(os.path.realpath(os.fspath(directory)))


@contextlib.contextmanager
def extracted_archive(
    resolved_archive_file: Union[str, os.PathLike], cleanup: bool = True
) -> Iterator[str]:
    """allennlp's `allennlp.models.archival.extracted_archive`, with `extract_archive`'s checks."""
    directory = extract_archive(resolved_archive_file)
    try:
        yield directory
    finally:
        if cleanup:
            shutil.rmtree(directory, ignore_errors=True)


class ExtractedArchive(contextlib.AbstractContextManager):
    """An archive (or a serialization directory) opened by `read_archive`, and its config; as a context
    manager released when the block ends (the last user of a `.tar.gz` removes its folder)."""

    def __init__(self, archive: str, directory: Path, key: Optional[Tuple] = None) -> None:
        self.archive = archive
        self.directory = directory
        self.config = read_config(directory, archive)
        self._key = key
        self._users = 0
        self.pid = os.getpid()

    def __exit__(self, *exc_info) -> None:
        self.release()

    def release(self) -> None:
        """One user (one `read_archive` call) is done; the last one removes the folder."""
        self._users -= 1
        if self._key is not None and self._users <= 0:
            _OPENED.pop(self._key, None)
            shutil.rmtree(self.directory, ignore_errors=True)

    def member(self, name: str) -> Optional[Path]:
        """The regular file `name` of the archive, or `None` if it has none."""
        return _regular_file(self.directory, name, self.archive)


_OPENED: Dict[Tuple, ExtractedArchive] = {}


def read_archive(
    archive_path: Union[str, os.PathLike], name: Optional[str] = None
) -> ExtractedArchive:
    """The archive at `archive_path` (a `.tar.gz` or a serialization directory), extracted once while in
    use (keyed by path, inode, size and mtime). `name` is how errors call it. (A directory is
    checked where `load_archive` reads its config: `check_model_folder`.)"""
    path = os.fspath(archive_path)
    name = name or path
    if os.path.isdir(path):
        return ExtractedArchive(name, Path(path))
    try:
        status = os.stat(path)
    except OSError:
        raise ConfigurationError(f"Model archive {name} does not exist") from None
    key = (os.path.realpath(path), status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    if key not in _OPENED:
        directory = extract_archive(path)
        try:
            _OPENED[key] = ExtractedArchive(name, Path(directory), key)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
    _OPENED[key]._users += 1
    return _OPENED[key]


@atexit.register
def remove_extracted_archives() -> None:
    """Removes every folder `read_archive` extracted (at exit; tests call it between cases)."""
    for opened in _OPENED.values():
        if opened.pid == os.getpid():  # not a forked child's: the parent still uses them
            shutil.rmtree(opened.directory, ignore_errors=True)
    _OPENED.clear()
