"""A full disk, reported once: a `DiskFullError` naming the file, its folder and the free space."""

import errno
import os
import shutil
from typing import Optional, Union

# No room: a full file system, a used-up quota, or a file past the size limit (`ulimit -f`).
_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


class DiskFullError(OSError):
    """Writing a file failed for lack of room (a full file system, a used-up quota, or EFBIG)."""


def find_disk_full(error: Optional[BaseException]) -> Optional[OSError]:
    """The ENOSPC / EDQUOT `OSError` in `error`'s chain of causes and contexts, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return error
        error = error.__cause__ or error.__context__
    return None


def _free_space(directory: str) -> str:
    try:
        return f"{shutil.disk_usage(directory).free / 1e6:,.1f} MB free"
    except OSError:
        return "free space unknown"


def disk_full_error(path: Union[str, os.PathLike], cause: OSError) -> DiskFullError:
    """A `DiskFullError` for a failed write of `path`."""
    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    remedy = "Free space"
    if cause.errno == errno.EFBIG:
        remedy = "Write to a file system that allows larger files or raise the limit (ulimit -f)"
    error = DiskFullError(
        cause.errno,
        f"{os.strerror(cause.errno)} while writing {path} ({_free_space(directory)} in "
        f"{directory}); earlier versions and checkpoints are intact. {remedy}, then run again "
        "(training: with --recover).",
    )
    error.filename = path
    return error
