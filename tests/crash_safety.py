"""
Helpers for the tests that start processes: a child process killed mid-write, what it leaves,
and waiting for a child without a wall-clock limit.
"""

import os
import signal
import time
from pathlib import Path
from typing import Callable, List, Optional

import pytest

from elmoc_allennlp.common.atomic_files import PARTIAL_MARKER

# A child that has used no CPU time for this long is blocked: it hangs (a runnable process gets
# the CPU within seconds however many share it; a busy machine only stretches its wall time).
STALLED_SECONDS = 120.0


def _cpu_seconds(pid: int) -> Optional[float]:
    """The CPU time `pid` has used (its own threads and its waited-for children), or None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def wait_for_child(pid: int, finished: Callable[[], bool], what: str) -> None:
    """
    Polls `finished()` until it is true. A hang guard that does not depend on how busy the
    machine is: fails, after SIGKILLing `pid`, once the child has used no CPU time for
    `STALLED_SECONDS` (where /proc is missing: once that long has passed since the start).
    """
    last_cpu, last_progress = _cpu_seconds(pid), time.monotonic()
    while not finished():
        cpu = _cpu_seconds(pid)
        if cpu is not None and cpu != last_cpu:
            last_cpu, last_progress = cpu, time.monotonic()
        if time.monotonic() - last_progress > STALLED_SECONDS:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while not finished():  # reaped
                time.sleep(0.02)
            pytest.fail(f"{what} hung (no CPU time used in {STALLED_SECONDS:.0f} s)")
        time.sleep(0.02)


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
    statuses = []

    def finished() -> bool:
        if not statuses:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses.append(status)
        return bool(statuses)

    wait_for_child(pid, finished, "the forked child")  # never hang the suite
    (status,) = statuses
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
