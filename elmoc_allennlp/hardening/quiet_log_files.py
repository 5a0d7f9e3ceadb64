"""
Opt-in: a full disk is reported once per log file.
Problem (allennlp 2.10.1): on a full disk every record of `out.log` fails and prints a traceback.
Workaround: with the switch, each `FileHandler` of `prepare_global_logging` reports a failed write
once on stderr, naming the file, and drops later records (the console keeps them). To drop it:
when allennlp's log files handle write errors.
"""
import functools
import logging
import sys
from typing import Optional

import allennlp.common.logging as common_logging

from elmoc_allennlp.common.shims import install_shim
from elmoc_allennlp.hardening.scope import everywhere

REPLACES = "log files report a full disk once, naming the file"
TARGETS = ("allennlp.common.logging.prepare_global_logging",)


def _quiet(original):
    @functools.wraps(original)
    def prepare_global_logging(*args, **kwargs):
        original(*args, **kwargs)
        if everywhere():
            quiet_full_log_files()

    return prepare_global_logging


def install() -> bool:
    install_shim(common_logging, "prepare_global_logging", _quiet)
    return True


def quiet_full_log_files(logger: Optional[logging.Logger] = None) -> None:
    """Makes each `FileHandler` of `logger` (default: the root) report a failed write once."""
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
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
        sys.stderr.write(f"Logging to {handler.baseFilename} failed ({reason}); later records dropped\n")
