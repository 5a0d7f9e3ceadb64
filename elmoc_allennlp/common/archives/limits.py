"""What every part of archive reading shares: member names, limits, errors naming the archive, `walk`."""

import contextlib
import os
import stat
import tarfile
import zlib
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple, Union

from allennlp.common.checks import ConfigurationError

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
# Where a downstream archive carries its biLMs, each `<key>/` with its config.json and vocabulary/.
CARRIED_DIRECTORY = "elmoc_bilm"
_LIMIT_NAMES = (
    "members, past ELMOC_ARCHIVE_MAX_MEMBERS",
    "bytes extracted, past ELMOC_ARCHIVE_MAX_BYTES or ELMOC_ARCHIVE_MAX_RATIO times the archive",
    "bytes of JSON, past ELMOC_ARCHIVE_MAX_JSON_BYTES",
    "folders, past ELMOC_ARCHIVE_MAX_FOLDERS",
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

    def __init__(self, archive: str, member: str, reason: str, folder: bool = False) -> None:
        self.archive = archive
        self.member = member
        self.reason = reason
        super().__init__(
            f"Refusing to load model folder {archive}: its file {member!r} {reason}. Nothing was loaded."
            if folder
            else f"Refusing to extract model archive {archive}: member {member!r} {reason}. Nothing was extracted."
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


def extraction_limits(archive_size: int) -> Tuple[int, ...]:
    """Members, bytes, bytes of one JSON member, folders (as `_LIMIT_NAMES`), components of a name."""
    # Weights hardly compress: a far larger expansion is a decompression bomb.
    ratio_bytes = max(1 << 30, archive_limit("ELMOC_ARCHIVE_MAX_RATIO") * archive_size)
    return (
        archive_limit("ELMOC_ARCHIVE_MAX_MEMBERS"),
        min(archive_limit("ELMOC_ARCHIVE_MAX_BYTES"), ratio_bytes),
        archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES"),
        archive_limit("ELMOC_ARCHIVE_MAX_FOLDERS"),
        archive_limit("ELMOC_ARCHIVE_MAX_DEPTH"),
    )


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


def _regular_file(directory: Union[str, os.PathLike], name: str, archive: str) -> Optional[Path]:
    path = Path(directory, *name.split("/"))
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if not stat.S_ISREG(mode):
        raise ConfigurationError(f"Model archive {archive}: {name} is not a regular file")
    return path


def walk(
    value: Any, prefix: str = "", skip: frozenset = frozenset()
) -> Iterator[Tuple[str, Any, Any, int]]:
    """`(dotted path, key, value, depth)` of every value of a nested config or state dict, in order and
    iteratively; the subtrees of keys in `skip` are left out."""
    stack = [(prefix, None, value, 1)]
    while stack:
        node = stack.pop()
        yield node
        path, _, value, depth = node
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, (list, tuple)):
            items = list(enumerate(value))
        else:
            continue
        stack.extend(
            (f"{path}.{key}" if path else str(key), key, item, depth + 1)
            for key, item in reversed(items)
            if key not in skip
        )


def find_keys(config: Any, key: str) -> Iterator[Tuple[str, Any]]:
    """Yields `(dotted path, value)` for every scalar under `key` in a nested config."""
    for path, name, value, _ in walk(config):
        if name == key and not isinstance(value, (dict, list)):
            yield path, value
