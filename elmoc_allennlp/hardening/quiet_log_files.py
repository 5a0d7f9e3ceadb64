"""Opt-in: each log file of `prepare_global_logging` reports a failed write once, naming the file
(allennlp 2.10.1 prints a traceback per record on a full disk)."""

import functools
import logging
import sys
from typing import Optional

from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import everywhere

REPLACES = "log files report a full disk once, naming the file"


def _prepare_global_logging(original, *args, **kwargs) -> None:
    original(*args, **kwargs)
    if everywhere():
        quiet_full_log_files()


def quiet_full_log_files(logger: Optional[logging.Logger] = None) -> None:
    """Makes each `FileHandler` of `logger` (default: the root) report a failed write once."""
    for handler in (logger or logging.getLogger()).handlers:
        if isinstance(handler, logging.FileHandler) and not hasattr(handler, "_elmoc_reported"):
            handler._elmoc_reported = False  # type: ignore[attr-defined]
            handler.handleError = functools.partial(_handle_error, handler, handler.handleError)


def _handle_error(handler: logging.FileHandler, original, record: logging.LogRecord) -> None:
    error = sys.exc_info()[1]
    if not isinstance(error, OSError):
        original(record)
    elif not handler._elmoc_reported:  # type: ignore[attr-defined]
        handler._elmoc_reported = True  # type: ignore[attr-defined]
        reason = error.strerror or str(error)
        sys.stderr.write(
            f"Logging to {handler.baseFilename} failed ({reason}); later records dropped\n"
        )


TARGETS, install = installer(
    {"allennlp.common.logging.prepare_global_logging": _prepare_global_logging}
)
