"""
A full disk, reported once and clearly.

Writers here go through `atomic_files`, which turns a write that fails for lack of space (the
`OSError` ENOSPC / EDQUOT, also when torch wraps it in a `RuntimeError`) into a `DiskFullError`
naming the file, its folder and the free space left, and keeps the previous version of the file.
A full disk also makes every record of a log file fail, and `logging` prints a traceback for
each one (hundreds of lines, burying the actual error): `quiet_full_log_files()` makes the log
file handlers report that once and then stop writing to the file.
"""
import errno
import logging
import os
import shutil
import sys
from typing import Optional, Union

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFullError(OSError):
    """Writing a file failed because its file system is full (or the user's quota is used up)."""


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
    error = DiskFullError(
        cause.errno,
        f"{os.strerror(cause.errno)} while writing {path} ({_free_space(directory)} in "
        f"{directory}). The file was not written; an earlier version of it, and every "
        "checkpoint written before, is intact. Free some space (or move the run), then run "
        "the command again (training: with --recover).",
    )
    error.filename = path
    return error


def quiet_full_log_files(logger: Optional[logging.Logger] = None) -> None:
    """
    Makes every `logging.FileHandler` of `logger` (default: the root logger, where allennlp puts
    `out.log` and the per-worker logs) report a failed write once, on stderr, naming the file,
    and then drop its records instead of printing a traceback per record. Idempotent.
    """
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) and not hasattr(handler, "_elmoc_quiet"):
            handler._elmoc_quiet = False  # type: ignore[attr-defined]
            handler.handleError = _quiet_handle_error(handler)  # type: ignore[assignment]


def _quiet_handle_error(handler: logging.FileHandler):
    original = handler.handleError

    def handle_error(record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            original(record)
            return
        if not handler._elmoc_quiet:  # type: ignore[attr-defined]
            handler._elmoc_quiet = True  # type: ignore[attr-defined]
            reason = error.strerror or str(error)
            sys.stderr.write(
                f"Logging to {handler.baseFilename} failed ({reason}); its later records are "
                "dropped (they still reach the console).\n"
            )

    return handle_error
