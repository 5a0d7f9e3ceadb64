"""
The one reader of model archives, which may come from strangers (every loader opens them here).
`extract_archive` writes only regular files and folders inside its folder, within the limits
`ELMOC_ARCHIVE_MAX_MEMBERS`, `ELMOC_ARCHIVE_MAX_BYTES`, `ELMOC_ARCHIVE_MAX_RATIO` (times the
archive's size, past 1 GiB) and `ELMOC_ARCHIVE_MAX_JSON_BYTES`. `read_config` reads configs as
strict JSON whose dotted types are never imported.
"""
import atexit
import contextlib
import json
import logging
import os
import posixpath
import shutil
import stat
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
# Members that must be regular files when present.
REGULAR_MEMBERS = ("config.json", "weights.th", "meta.json")
_DEFAULT_LIMITS = {
    "ELMOC_ARCHIVE_MAX_MEMBERS": 100_000,
    "ELMOC_ARCHIVE_MAX_BYTES": 64 << 30,
    "ELMOC_ARCHIVE_MAX_RATIO": 100,
    "ELMOC_ARCHIVE_MAX_JSON_BYTES": 16 << 20,
}
_LIMIT_NAMES = (
    "members, past ELMOC_ARCHIVE_MAX_MEMBERS",
    "bytes extracted, past ELMOC_ARCHIVE_MAX_BYTES or ELMOC_ARCHIVE_MAX_RATIO times the archive",
    "bytes of JSON, past ELMOC_ARCHIVE_MAX_JSON_BYTES",
)
_SPECIAL_FILES = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
}

# Errors of truncated or damaged compressed streams.
_STREAM_ERRORS: tuple = (tarfile.TarError, EOFError, zlib.error, OSError)
try:
    import lzma

    _STREAM_ERRORS += (lzma.LZMAError,)
except ImportError:  # pragma: no cover  (a Python built without lzma)
    pass


class UnsafeArchiveError(ConfigurationError):
    """An archive member is not a plain file or folder inside the archive, or is too large."""

    def __init__(self, archive: str, member: str, reason: str) -> None:
        self.archive = archive
        self.member = member
        super().__init__(
            f"Refusing to extract model archive {archive}: member {member!r} {reason}. "
            "Nothing was extracted."
        )


class CorruptArchiveError(ConfigurationError):
    """An archive is truncated, corrupt, or not a tar archive at all."""

    def __init__(self, archive: str, problem: str) -> None:
        self.archive = archive
        super().__init__(
            f"{archive} is not a readable model archive: {problem}; download or copy it again"
        )


@contextlib.contextmanager
def _damage_named(archive: str, what: str = "") -> Iterator[None]:
    """Turns the errors of a truncated or damaged stream into a `CorruptArchiveError`."""
    try:
        yield
    except _STREAM_ERRORS as error:
        # An OSError with an errno is the file system's (disk full, permissions), not the data's.
        if isinstance(error, OSError) and error.errno is not None:
            raise
        text = f"{type(error).__name__}: {error}".splitlines()[0].rstrip(": ")
        raise CorruptArchiveError(archive, f"{what}truncated or corrupt ({text})") from None


def archive_limit(variable: str) -> int:
    """The limit `variable`: the environment's value, else the default."""
    value = os.environ.get(variable) or str(_DEFAULT_LIMITS[variable])
    if not value.isdigit() or int(value) == 0:
        raise ConfigurationError(f"{variable} must be a positive integer, got {value!r}")
    return int(value)


def open_archive(archive_path: Union[str, os.PathLike]) -> tarfile.TarFile:
    """`tarfile.open(archive_path, "r:*")`, naming the file if it is not a tar archive."""
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
        return tarfile.open(archive, "r:*")


def _check_member(
    archive: str,
    member: tarfile.TarInfo,
    names: Dict[str, bool],
    totals: List[int],
    limits: Tuple[int, int, int],
) -> str:
    """
    The member's normalised name, or `UnsafeArchiveError`. `names` maps every name seen (members
    and their parent folders) to whether it is a folder; `totals` counts members and bytes.
    """
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
    normalised = posixpath.normpath(name)
    if normalised == "." and member.isdir():
        return normalised
    if member.isdir() and normalised in REGULAR_MEMBERS:
        raise UnsafeArchiveError(archive, name, "is a folder, where a regular file is expected")
    if normalised == "." or (normalised in names and not (member.isdir() and names[normalised])):
        raise UnsafeArchiveError(archive, name, "appears twice in the archive")
    parent = posixpath.dirname(normalised)
    while parent and names.get(parent) is not True:
        if parent in names or parent in REGULAR_MEMBERS:
            raise UnsafeArchiveError(archive, name, f"is inside {parent!r}, which is a file")
        names[parent] = True
        parent = posixpath.dirname(parent)
    names[normalised] = member.isdir()
    totals[0] += 1
    totals[1] += member.size if member.isfile() else 0
    json_bytes = member.size if normalised.endswith(".json") else 0
    for value, limit, what in zip((*totals, json_bytes), limits, _LIMIT_NAMES):
        if value > limit:
            raise UnsafeArchiveError(archive, name, f"makes {value:,} {what} ({limit:,})")
    return normalised


def _extract_members(tar: tarfile.TarFile, archive: str, directory: str) -> None:
    names: Dict[str, bool] = {}
    totals = [0, 0]
    # Weights hardly compress: a far larger expansion is a decompression bomb.
    ratio_bytes = max(1 << 30, archive_limit("ELMOC_ARCHIVE_MAX_RATIO") * os.path.getsize(archive))
    limits = (
        archive_limit("ELMOC_ARCHIVE_MAX_MEMBERS"),
        min(archive_limit("ELMOC_ARCHIVE_MAX_BYTES"), ratio_bytes),
        archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES"),
    )
    members = iter(tar)
    while True:
        with _damage_named(archive):
            member = next(members, None)
        if member is None:
            break
        normalised = _check_member(archive, member, names, totals, limits)
        target = os.path.join(directory, *normalised.split("/"))
        os.makedirs(target if member.isdir() else os.path.dirname(target), exist_ok=True)
        if member.isfile():
            with _damage_named(archive, f"member {member.name!r} is "), open(target, "xb") as out:
                shutil.copyfileobj(tar.extractfile(member), out, 1 << 20)
    # `tarfile` stops silently at a cut header: a complete archive ends with two zero blocks
    # (and a compressed one with its checksum, checked by reading to the end).
    with _damage_named(archive):
        tar.fileobj.seek(tar.offset)
        marker = tar.fileobj.read(2 * tarfile.BLOCKSIZE)
        if len(marker) < 2 * tarfile.BLOCKSIZE or marker.count(0) != len(marker):
            raise CorruptArchiveError(
                archive, f"truncated or corrupt after {tar.offset:,} bytes of tar data"
            )
        while tar.fileobj.read(1 << 20):
            pass
    for required, is_folder in ((CONFIG_NAME, False), ("weights.th", False), ("vocabulary/", True)):
        if names.get(required.rstrip("/")) is not is_folder:
            raise ConfigurationError(f"Model archive {archive} has no {required}")
    if "meta.json" in names:
        read_config(directory, archive, "meta.json")


_EXTRACTED_FROM: Dict[str, str] = {}  # extraction folder -> its archive


def extract_archive(
    archive_path: Union[str, os.PathLike], directory: Optional[Union[str, os.PathLike]] = None
) -> str:
    """
    Extracts `archive_path` into `directory` (which must not exist) or a new temporary folder,
    checking every member before it is written, and returns the folder.
    """
    archive = os.fspath(archive_path)
    with open_archive(archive) as tar:
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


def _regular_file(directory: Union[str, os.PathLike], name: str, archive: str) -> Optional[Path]:
    path = Path(directory, *name.split("/"))
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if not stat.S_ISREG(mode):
        raise ConfigurationError(f"Model archive {archive}: {name} is not a regular file")
    return path


class ExtractedArchive:
    """
    An archive (or a serialization directory) opened by `read_archive`, and its config. Used as a
    context manager (`with read_archive(path) as extracted:`), it is released when the block
    ends, however it ends: the folder of a `.tar.gz` goes when no block uses it any more.
    """

    def __init__(self, archive: str, directory: Path, key: Optional[Tuple] = None) -> None:
        self.archive = archive
        self.directory = directory
        self.config = read_config(directory, archive)
        self._key = key
        self._users = 0
        self.pid = os.getpid()

    def __enter__(self) -> "ExtractedArchive":
        return self

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


def read_archive(archive_path: Union[str, os.PathLike], name: Optional[str] = None) -> ExtractedArchive:
    """
    The archive at `archive_path` (a `.tar.gz` or a serialization directory), extracted once
    while it is in use (shared by path, inode, size and modification time; see
    `ExtractedArchive`). `name` is how errors call it.
    """
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


def find_keys(config: Any, key: str, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """Yields `(dotted path, value)` for every scalar under `key` in a nested config."""
    if isinstance(config, dict):
        for name, value in config.items():
            path = f"{prefix}.{name}" if prefix else str(name)
            if name == key and not isinstance(value, (dict, list)):
                yield path, value
            else:
                yield from find_keys(value, key, path)
    elif isinstance(config, list):
        for index, value in enumerate(config):
            yield from find_keys(value, key, f"{prefix}.{index}")


def read_config(
    directory: Union[str, os.PathLike], archive: str, member: str = CONFIG_NAME
) -> Dict[str, Any]:
    """The strict-JSON config `member` of an extracted archive, its types checked."""
    path = _regular_file(directory, member, archive)
    if path is None:
        raise ConfigurationError(f"Model archive {archive} has no {member}")
    limit = archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES")
    if os.path.getsize(path) > limit:
        raise ConfigurationError(
            f"Model archive {archive}: {member} is larger than ELMOC_ARCHIVE_MAX_JSON_BYTES ({limit:,})"
        )
    try:
        config = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ConfigurationError(
            f"The {member} of model archive {archive} is not JSON ({type(error).__name__}: "
            f"{str(error)[:200]}); archived configs are strict JSON, never jsonnet"
        ) from None
    if not isinstance(config, dict):
        raise ConfigurationError(f"The {member} of model archive {archive} is not a JSON object")
    if member.endswith(CONFIG_NAME) and not isinstance(config.get("model"), dict):
        raise ConfigurationError(f"The {member} of model archive {archive} has no model section")
    check_config_types(config, f"{archive} ({member})")
    return config


def check_config_types(config: Dict[str, Any], source: str) -> None:
    """
    Every dotted `"type"` of an archived config must be a registered name, or a `FromParams` or
    registered class of a module already imported; nothing is imported.
    """
    from allennlp.common.from_params import FromParams
    from allennlp.common.registrable import Registrable

    registry = [entry for entries in Registrable._registry.values() for entry in entries.items()]
    for key, value in find_keys(config, "type"):
        if not isinstance(value, str) or "." not in value:
            continue
        module_name, _, attribute = value.rpartition(".")
        found = getattr(sys.modules.get(module_name), attribute, None)
        component = isinstance(found, type) and issubclass(found, FromParams)
        if not (component or any(value == name or found is cls for name, (cls, _) in registry)):
            raise ConfigurationError(
                f"{source}: {key} is {value!r}, which is neither a registered name nor a component "
                "class of an imported module. Names in an archive are never imported: import the "
                "package yourself (--include-package) if you trust it."
            )
