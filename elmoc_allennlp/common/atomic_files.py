"""Crash-safe writing: under a temporary name in the file's folder, synced, renamed into place; a
kill leaves the old or the new file (and a `.NAME.partial-*` that `remove_stale_partial_files` deletes).
"""

import contextlib
import glob
import logging
import os
import tempfile
from os import PathLike
from typing import IO, Any, Iterator, List, Optional, Union

import torch

from elmoc_allennlp.common.disk_full import DiskFullError, disk_full_error, find_disk_full

logger = logging.getLogger(__name__)

PARTIAL_MARKER = ".partial-"


# mkstemp creates files readable by their owner only; the final files get the usual mode.
_UMASK = os.umask(0o022)
os.umask(_UMASK)
_FILE_MODE = 0o666 & ~_UMASK


def _fsync_directory(directory: str) -> None:
    # Makes the rename itself durable; not supported on every file system.
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


@contextlib.contextmanager
def atomic_path(path: Union[str, PathLike]) -> Iterator[str]:
    """A temporary path next to `path`, renamed to it if the block ends without an exception, else
    deleted; a write failed for lack of space is a `DiskFullError`."""
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    temporary = None
    try:
        # The writer's pid in the name: see `_writer_runs`.
        handle, temporary = tempfile.mkstemp(
            dir=directory, prefix=f".{name}{PARTIAL_MARKER}{os.getpid()}-"
        )
        os.close(handle)
        os.chmod(temporary, _FILE_MODE)
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
        _fsync_directory(directory)
    except BaseException as error:
        full = find_disk_full(error)
        if full is None or isinstance(error, DiskFullError):
            raise
        raise disk_full_error(path, full) from None
    finally:
        if temporary is not None and os.path.exists(temporary):
            os.remove(temporary)


@contextlib.contextmanager
def atomic_write(path: Union[str, PathLike], mode: str = "wb") -> Iterator[IO[Any]]:
    """A file open for writing (`mode` `"wb"`, or `"w"`: UTF-8 text) that replaces `path` as `atomic_path`."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write supports modes 'w' and 'wb', got {mode!r}")
    encoding = None if "b" in mode else "utf-8"
    with atomic_path(path) as temporary, open(temporary, mode, encoding=encoding) as handle:
        yield handle


def atomic_torch_save(obj: Any, path: Union[str, PathLike]) -> None:
    """`torch.save(obj, path)`, atomically."""
    with atomic_write(path, "wb") as handle:
        torch.save(obj, handle)


def same_file(first: Union[str, PathLike], second: Union[str, PathLike]) -> bool:
    """Whether two paths name one file: the same resolved path, or the same inode (a hard link, a mount)."""
    first, second = os.path.expanduser(os.fspath(first)), os.path.expanduser(os.fspath(second))
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def _writer_runs(partial: str) -> bool:
    pid = os.path.basename(partial).rsplit(PARTIAL_MARKER, 1)[-1].split("-")[0]
    if not pid.isdigit():
        return False  # no pid in the name
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: it runs
        pass
    return True


def remove_stale_partial_files(
    directory: Union[str, PathLike], for_file: Optional[str] = None, locked: bool = False
) -> List[str]:
    """Deletes the temporary files of killed writers in `directory` (only `for_file`'s if given); one whose
    writer (the pid in its name) runs is kept unless `locked` (the caller holds its lock)."""
    removed = []
    pattern = f".{glob.escape(for_file)}{PARTIAL_MARKER}*" if for_file else f".*{PARTIAL_MARKER}*"
    for path in glob.glob(os.path.join(glob.escape(os.fspath(directory)), pattern)):
        if not (locked and for_file) and _writer_runs(path):
            continue
        with contextlib.suppress(OSError):
            os.remove(path)
            removed.append(path)
    if removed:
        logger.info("Removed %d partially written file(s) in %s", len(removed), directory)
    return removed
