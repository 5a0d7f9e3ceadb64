"""
The one reader of model archives, which may come from strangers (every loader opens them here).
`extract_archive` writes only regular files and folders inside its folder, within the limits
`ELMOC_ARCHIVE_MAX_MEMBERS`, `ELMOC_ARCHIVE_MAX_BYTES`, `ELMOC_ARCHIVE_MAX_RATIO` (times the
archive's size, past 1 GiB), `ELMOC_ARCHIVE_MAX_JSON_BYTES`, `ELMOC_ARCHIVE_MAX_FOLDERS`,
`ELMOC_ARCHIVE_MAX_DEPTH` (components of a member's name) and
`ELMOC_ARCHIVE_MAX_VOCABULARY_LINES` / `_BYTES` (the vocabulary's namespace files together, which
must be UTF-8). `weights.th` is checked from its records' headers before torch reads it
(`check_weights_file`). `read_config` reads configs as strict JSON whose dotted types are never
imported, that name no URL and no other archive, and whose sizes imply at most
`ELMOC_ARCHIVE_MAX_PARAMETERS` parameters (`config_parameter_bound`).
"""
import atexit
import codecs
import contextlib
import io
import json
import math
import pickle
import logging
import os
import posixpath
import shutil
import stat
import sys
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.disk_full import DiskFullError, find_disk_full

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
# Members that must be regular files when present.
REGULAR_MEMBERS = ("config.json", "weights.th", "meta.json")
_DEFAULT_LIMITS = {
    "ELMOC_ARCHIVE_MAX_MEMBERS": 100_000,
    "ELMOC_ARCHIVE_MAX_BYTES": 64 << 30,
    "ELMOC_ARCHIVE_MAX_RATIO": 100,
    "ELMOC_ARCHIVE_MAX_JSON_BYTES": 16 << 20,
    "ELMOC_ARCHIVE_MAX_FOLDERS": 10_000,
    "ELMOC_ARCHIVE_MAX_DEPTH": 32,
    "ELMOC_ARCHIVE_MAX_VOCABULARY_LINES": 4_000_000,
    "ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES": 256 << 20,
    "ELMOC_ARCHIVE_MAX_PARAMETERS": 2_000_000_000,
}
# The deepest nesting of an archived JSON config (real ones nest under 10 levels).
MAX_JSON_DEPTH = 100
# The longest component of a member's name, in bytes (most file systems' limit).
MAX_NAME_COMPONENT_BYTES = 255
VOCABULARY_NAME = "vocabulary"
# allennlp's `Vocabulary.from_files` opens this file of the vocabulary folder first, always.
VOCABULARY_NAMESPACES = "non_padded_namespaces.txt"
# The folder of a downstream archive holding the copies of its biLMs (`downstream/archive.py`),
# each `<key>/` with its own config.json and vocabulary/.
CARRIED_DIRECTORY = "elmoc_bilm"
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
    return limit_variable(variable, _DEFAULT_LIMITS[variable])


def limit_variable(variable: str, default: int) -> int:
    """The positive integer environment variable `variable`, else `default`."""
    value = os.environ.get(variable) or str(default)
    # ASCII digits only (`"²".isdigit()` is true), and few enough that `int` is cheap.
    if not (value.isascii() and value.isdigit() and len(value) <= 30) or int(value) == 0:
        shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value):,} characters)"
        raise ConfigurationError(
            f"{variable} must be a positive integer of at most 30 digits, got {shown!r}"
        )
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
    limits: Tuple[int, ...],
) -> str:
    """
    The member's normalised name, or `UnsafeArchiveError`. `names` maps every name seen (members
    and their parent folders) to whether it is a folder; `totals` counts members, bytes and
    folders; `limits` are those of `_extraction_limits`.
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
    components = name.count("/") + 1
    if components > limits[3]:
        raise UnsafeArchiveError(
            archive,
            name[:200],
            f"has {components:,} path components, past ELMOC_ARCHIVE_MAX_DEPTH ({limits[3]:,})",
        )
    parts = name.split("/")
    if any(len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_COMPONENT_BYTES for part in parts):
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
        raise UnsafeArchiveError(archive, name, "is a folder inside vocabulary/, where files are expected")
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
    for value, limit, what in zip((totals[0], totals[1], json_bytes), limits, _LIMIT_NAMES):
        if value > limit:
            raise UnsafeArchiveError(archive, name, f"makes {value:,} {what} ({limit:,})")
    if totals[2] > limits[4]:
        raise UnsafeArchiveError(
            archive, name, f"makes {totals[2]:,} folders, past ELMOC_ARCHIVE_MAX_FOLDERS ({limits[4]:,})"
        )
    return normalised


class _VocabularyCount:
    """Counts the lines and bytes of the vocabulary's namespace files, and checks their UTF-8."""

    def __init__(self, archive: str, line_limit: int, byte_limit: int) -> None:
        self.archive, self.line_limit, self.byte_limit = archive, line_limit, byte_limit
        self.lines = self.bytes = 0

    def copy(self, source, out, name: str) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")()
        lines_before = self.lines
        while True:
            chunk = source.read(1 << 20)
            if not chunk:
                break
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line = self.lines - lines_before + chunk[: error.start].count(b"\n") + 1
                raise UnsafeArchiveError(
                    self.archive, name, f"is not UTF-8 text (line {line:,}: {error.reason})"
                ) from None
            self.lines += chunk.count(b"\n")
            self.bytes += len(chunk)
            for value, limit, what in (
                (self.lines, self.line_limit, "lines, past ELMOC_ARCHIVE_MAX_VOCABULARY_LINES"),
                (self.bytes, self.byte_limit, "bytes, past ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES"),
            ):
                if value > limit:
                    raise UnsafeArchiveError(
                        self.archive, name, f"makes the vocabulary {value:,} {what} ({limit:,})"
                    )
            out.write(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as error:
            raise UnsafeArchiveError(
                self.archive, name, f"is not UTF-8 text ({error.reason} at its end)"
            ) from None


def _is_vocabulary(folder: str) -> bool:
    """Whether `folder` is the vocabulary of the archive, or of a biLM copy it carries."""
    parts = folder.split("/")
    return parts == [VOCABULARY_NAME] or (
        len(parts) == 3 and parts[0] == CARRIED_DIRECTORY and parts[2] == VOCABULARY_NAME
    )


def _extraction_limits(archive: str) -> Tuple[int, ...]:
    # Weights hardly compress: a far larger expansion is a decompression bomb.
    ratio_bytes = max(1 << 30, archive_limit("ELMOC_ARCHIVE_MAX_RATIO") * os.path.getsize(archive))
    return (
        archive_limit("ELMOC_ARCHIVE_MAX_MEMBERS"),
        min(archive_limit("ELMOC_ARCHIVE_MAX_BYTES"), ratio_bytes),
        archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES"),
        archive_limit("ELMOC_ARCHIVE_MAX_DEPTH"),
        archive_limit("ELMOC_ARCHIVE_MAX_FOLDERS"),
    )


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
    limits = _extraction_limits(archive)
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
                with _damage_named(archive, f"member {member.name!r} is "), open(target, "xb") as out:
                    source = tar.extractfile(member)
                    if _is_vocabulary(posixpath.dirname(normalised)):
                        vocabulary.copy(source, out, member.name)
                    else:
                        shutil.copyfileobj(source, out, 1 << 20)
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
    held = check_weights_file(os.path.join(directory, "weights.th"), archive, "weights.th")
    # Every config of the archive (its own, and those of the biLMs a downstream model carries)
    # builds layers whose parameters the weights hold: a config implying more is refused before
    # any layer is built.
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
    # Each biLM copy a downstream archive carries is loaded with its own vocabulary.
    for name in sorted(names):
        folder = posixpath.dirname(name)
        if posixpath.basename(name) == CONFIG_NAME and folder.startswith(CARRIED_DIRECTORY + "/"):
            vocabulary = posixpath.join(folder, VOCABULARY_NAME)
            if names.get(vocabulary) is not True or names.get(
                posixpath.join(vocabulary, VOCABULARY_NAMESPACES)
            ) is not False:
                raise UnsafeArchiveError(
                    archive, vocabulary + "/", f"(of the carried biLM {name}) is missing or has no "
                    f"{VOCABULARY_NAMESPACES}"
                )


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


# ---------------------------------------------------------------------- weights.th, from its headers

# Bytes per element of the storage classes torch names in a weights file.
_STORAGE_BYTES = {
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2,
    "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1,
    "BoolStorage": 1, "ComplexDoubleStorage": 16, "ComplexFloatStorage": 8, "UntypedStorage": 1,
}
# The largest `data.pkl` read to check the records (a state dict's is a few KB per 100 tensors).
_MAX_PICKLE_BYTES = 64 << 20


class _Storage:
    def __init__(self, kind: str, key: str, numel: int) -> None:
        self.kind, self.key, self.numel = kind, key, numel


class _Tensor:
    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


def _rebuild_tensor(storage, offset, size, stride, *rest):
    return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data, *rest):
    return data


def _rebuild_from_type(function, new_type, args, state):
    return function(*args)


_STANDINS = {
    "_rebuild_tensor": _rebuild_tensor,
    "_rebuild_tensor_v2": _rebuild_tensor,
    "_rebuild_parameter": _rebuild_parameter,
    "_rebuild_parameter_with_state": _rebuild_parameter,
    "_rebuild_from_type_v2": _rebuild_from_type,
}


class _HeaderUnpickler(pickle.Unpickler):
    """Reads what a weights file's tensors are (storages, offsets, sizes, strides), building none."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in _STORAGE_BYTES:
            return name
        if module == "torch._utils" and name in _STANDINS:
            return _STANDINS[name]
        from elmoc_allennlp.common.torch_versions import _allowed_globals

        allowed = _allowed_globals().get((module, name))
        if allowed is None or module == "torch._utils":
            raise pickle.UnpicklingError(f"holds {module}.{name}, not a plain dense tensor")
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"holds an unknown persistent record {str(pid)[:80]}")
        _, kind, key, _, numel = pid
        if kind not in _STORAGE_BYTES or not isinstance(numel, int) or numel < 0:
            raise pickle.UnpicklingError(
                f"holds a storage of type {str(kind)[:40]} and size {str(numel)[:40]}"
            )
        return _Storage(kind, str(key), numel)


def _tensors(value: Any) -> Iterator[Tuple[str, Any]]:
    """`(key, _Tensor)` for every tensor in an unpickled state dict (iteratively)."""
    stack = [("", value)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, _Tensor):
            yield key, value
        elif isinstance(value, dict):
            stack.extend((f"{key}.{name}" if key else str(name), item) for name, item in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{key}.{index}" if key else str(index), item) for index, item in enumerate(value))


def check_weights_file(path: Union[str, os.PathLike], archive: str, member: str) -> int:
    """
    Checks a torch weights file from its headers before torch reads it, and returns how many
    values it holds: a zip of uncompressed records (a compressed one would inflate unbounded),
    each storage's record exactly the size its header declares, and each tensor inside its
    storage (a tiny record cannot rebuild a huge tensor). Raises `UnsafeArchiveError` naming the
    member and the record or tensor key.
    """
    def refuse(reason: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(archive, member, reason)

    try:
        zipped = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        raise refuse("is not a torch weights file (a zip archive, as torch.save writes)") from None
    with zipped:
        records = {}
        for info in zipped.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise refuse(
                    f"has a compressed record {info.filename!r} (torch.save stores them uncompressed)"
                )
            records[info.filename] = info
        # Stored records are parts of the file: together no larger than it, whatever a header
        # says (torch would allocate what the header declares before reading it).
        size, declared = os.path.getsize(path), 0
        for info in sorted(records.values(), key=lambda info: -info.file_size):
            declared += info.file_size
            if declared > size:
                raise refuse(
                    f"has a record {info.filename!r} whose header declares {info.file_size:,} "
                    f"bytes, past what the file of {size:,} bytes holds"
                )
        pickles = [name for name in records if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise refuse("has no single data.pkl record")
        prefix = pickles[0][: -len("data.pkl")]
        if records[pickles[0]].file_size > _MAX_PICKLE_BYTES:
            raise refuse(f"has a data.pkl of {records[pickles[0]].file_size:,} bytes")
        try:
            state = _HeaderUnpickler(io.BytesIO(zipped.read(pickles[0]))).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
                IndexError, KeyError, RecursionError, MemoryError, zipfile.BadZipFile) as error:
            raise refuse(f"is not a file of tensors ({type(error).__name__}: {str(error)[:200]})") from None
    storages: Dict[str, int] = {}
    for key, tensor in _tensors(state):
        storage = tensor.storage
        if not isinstance(storage, _Storage):
            raise refuse(f"has a tensor {key!r} without a storage")
        record = records.get(f"{prefix}data/{storage.key}")
        expected = storage.numel * _STORAGE_BYTES[storage.kind]
        if record is None or record.file_size != expected:
            size = "no record" if record is None else f"a record of {record.file_size:,} bytes"
            raise refuse(
                f"has a tensor {key!r} whose storage declares {expected:,} bytes but has {size}"
            )
        storages[storage.key] = storage.numel
        size, stride, offset = tensor.size, tensor.stride, tensor.offset
        if not (
            isinstance(offset, int) and isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) and all(isinstance(n, int) and n >= 0 for n in size + stride)
            and offset >= 0
        ):
            raise refuse(f"has a tensor {key!r} of size {str(size)[:80]} and stride {str(stride)[:80]}")
        numel = math.prod(size)
        extent = offset + sum((n - 1) * step for n, step in zip(size, stride)) + 1 if numel else 0
        if numel > storage.numel or extent > storage.numel:
            raise refuse(
                f"has a tensor {key!r} of {numel:,} elements (size {list(size)}, stride "
                f"{list(stride)}) rebuilt from a storage of {storage.numel:,}"
            )
    return sum(storages.values())


# ---------------------------------------------------------------------- what a config may build

# Keys of sizes that make a layer's weight matrices, and of how many layers are stacked.
_DIMENSION_KEYS = frozenset((
    "input_dim", "hidden_dim", "cell_dim", "projection_dim", "embedding_dim", "output_dim",
    "input_size", "hidden_size", "feedforward_hidden_dim", "num_filters", "hidden_dims",
    "output_dims",
))
_LAYER_COUNT_KEYS = frozenset(("num_layers",))


def config_parameter_bound(config: Any, prefix: str = "model") -> Tuple[int, str]:
    """
    A lower bound of the parameters a model config builds, computed from its sizes before any
    layer is built, and the dotted key that adds most to it. Each object with two or more sizes
    (`input_dim`, `cell_dim`, `projection_dim`, ...) holds at least a (smallest x largest)
    matrix, and each of its `num_layers` past the first a (smallest x smallest) one (as in
    LSTMs, transformers, feedforward and maxout stacks; an object with one size adds nothing).
    """
    total, largest = 0, (0, prefix)
    stack = [(prefix, config)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, list):
            stack.extend((f"{where}.{index}", item) for index, item in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        dimensions = {}
        layers = (1, "")
        for name, item in value.items():
            if isinstance(item, (dict, list)):
                stack.append((f"{where}.{name}", item))
            elif isinstance(item, int) and not isinstance(item, bool) and item > 0:
                if name in _DIMENSION_KEYS:
                    dimensions[name] = item
                elif name in _LAYER_COUNT_KEYS:
                    layers = (item, name)
        if len(dimensions) < 2:  # one size alone says nothing of a layer's matrices
            continue
        smallest, largest_name = min(dimensions.values()), max(dimensions, key=dimensions.get)
        matrix = smallest * dimensions[largest_name]
        stacked = (layers[0] - 1) * smallest * smallest
        bound = matrix + stacked
        key = f"{where}.{layers[1] if stacked > matrix else largest_name}"
        total += bound
        largest = max(largest, (bound, key))
    return total, largest[1]


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
        config = json.loads(path.read_bytes().decode("utf-8"), parse_constant=_NotJson)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ConfigurationError(
            f"The {member} of model archive {archive} is not JSON ({type(error).__name__}: "
            f"{str(error)[:200]}); archived configs are strict JSON, never jsonnet"
        ) from None
    if _json_depth(config) > MAX_JSON_DEPTH:
        raise ConfigurationError(
            f"The {member} of model archive {archive} nests deeper than {MAX_JSON_DEPTH} levels"
        )
    if not isinstance(config, dict):
        raise ConfigurationError(f"The {member} of model archive {archive} is not a JSON object")
    for key, value in _leaves(config):
        if isinstance(value, _NotJson):
            raise ConfigurationError(
                f"{archive} ({member}): {key} is {value.name}, which strict JSON does not have "
                "(archived configs are strict JSON)"
            )
    if member.endswith(CONFIG_NAME) and not isinstance(config.get("model"), dict):
        raise ConfigurationError(f"The {member} of model archive {archive} has no model section")
    check_config_types(config, f"{archive} ({member})")
    if member.endswith(CONFIG_NAME):
        check_self_contained(config, directory, f"{archive} ({member})")
        limit = archive_limit("ELMOC_ARCHIVE_MAX_PARAMETERS")
        bound, key = config_parameter_bound(config["model"], "model")
        if bound > limit:
            raise ConfigurationError(
                f"{archive} ({member}): {key} makes the model at least {bound:,} parameters, past "
                f"ELMOC_ARCHIVE_MAX_PARAMETERS ({limit:,}); nothing was built"
            )
    return config


class _NotJson:
    """Python's `json` reads `NaN`, `Infinity` and `-Infinity`, which JSON has not: as this."""

    def __init__(self, name: str) -> None:
        self.name = name


def _leaves(config: Any) -> Iterator[Tuple[str, Any]]:
    """`(dotted key, value)` of every value that is neither an object nor a list."""
    stack = [("", config)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, (dict, list)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((f"{where}.{name}" if where else str(name), item) for name, item in items)
        else:
            yield where, value


def _json_depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return deepest


# The sections of a config that loading an archive builds (the data paths are never read, the
# vocabulary comes from the archive's files).
_LOADED_SECTIONS = ("model", "dataset_reader", "validation_dataset_reader")
# Keys whose subtrees allennlp's `load_archive` drops before building (`remove_keys_from_params`).
_DROPPED_AT_LOADING = frozenset(("pretrained_file", "initializer"))
# Registered constructors that open another archive.
_OTHER_ARCHIVE_TYPES = ("from_archive", "elmoc_bilm_from_archive")


def _strings(config: Any, prefix: str) -> Iterator[Tuple[str, str]]:
    stack = [(prefix, config)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            yield where, value
        elif isinstance(value, dict):
            stack.extend(
                (f"{where}.{name}", item) for name, item in value.items()
                if name not in _DROPPED_AT_LOADING
            )
        elif isinstance(value, list):
            stack.extend((f"{where}.{index}", item) for index, item in enumerate(value))


# Where a downstream archive carries the copy of the biLM an `archive_file` names: set by
# `downstream/archive.py`, which writes the copies (`register_carried_copies`). Until it is set,
# every `archive_file` in a loaded config is refused.
_carried_copy: Optional[Callable[[Union[str, os.PathLike], str], Path]] = None


def register_carried_copies(locate: Callable[[Union[str, os.PathLike], str], Path]) -> None:
    """`locate(directory, archive_file)`: the folder of the carried copy `check_self_contained` accepts."""
    global _carried_copy
    _carried_copy = locate


def check_self_contained(config: Dict[str, Any], directory: Union[str, os.PathLike], source: str) -> None:
    """
    Loading an archive reads that archive only (and, by the documented rules, its fastText
    `.bin`): the sections loading builds (not the `pretrained_file` and `initializer` keys
    allennlp drops first) may name no URL and no other archive (allennlp's `from_archive` model, a
    fine-tuning `elmoc_bilm_from_archive`, or a biLM `archive_file` whose copy it does not carry
    in `elmoc_bilm/`).
    """
    for section in _LOADED_SECTIONS:
        for key, value in _strings(config.get(section), section):
            name = key.rpartition(".")[2]
            if "://" in value:
                raise ConfigurationError(
                    f"{source}: {key} is the URL {value[:200]!r}; loading an archive reads "
                    "nothing outside it"
                )
            if name == "type" and value in _OTHER_ARCHIVE_TYPES:
                raise ConfigurationError(
                    f"{source}: {key} is {value!r}, which opens another archive; loading an "
                    "archive reads nothing outside it"
                )
            if name == "archive_file":
                carried = _carried_copy(directory, value) / CONFIG_NAME if _carried_copy else None
                if carried is None or not (os.path.isfile(carried) and not os.path.islink(carried)):
                    raise ConfigurationError(
                        f"{source}: {key} names the archive {value[:200]!r}, whose copy this "
                        "archive does not carry (elmoc_bilm/); loading an archive reads nothing "
                        "outside it"
                    )


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
