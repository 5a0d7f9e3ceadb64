"""Helpers for the crash-safety tests: a child process killed mid-write, and what it leaves."""
import os
import signal
import time
from pathlib import Path
from typing import Callable, List

import pytest

from elmoc_allennlp.common.atomic_files import PARTIAL_MARKER


def partial_files(directory: Path) -> List[str]:
    """The temporary files that killed atomic writers left in `directory`."""
    return sorted(p.name for p in directory.iterdir() if PARTIAL_MARKER in p.name)


def killed_in_forked_child(action: Callable[[], None]) -> None:
    """
    Runs `action` in a forked copy of this process, which is expected to SIGKILL itself (as a
    `kill -9` or a pre-empted machine would) before it returns.
    """
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            action()
        finally:
            os._exit(3)
    deadline = time.monotonic() + 60
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            break
        if time.monotonic() > deadline:  # never hang the suite
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.02)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
