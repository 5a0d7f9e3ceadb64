"""
`tools/busy.sh` (`make test-busy`, CI's busy run): the command's exit status is the script's, and
its busy loops never outlive it, even when it is killed with SIGKILL.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

BUSY = Path(__file__).resolve().parents[2] / "tools" / "busy.sh"

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")


def _loops(stderr: str) -> List[int]:
    return [int(pid) for pid in re.search(r"pids ([\d ]+)\)", stderr).group(1).split()]


def _running(pid: int) -> bool:
    """`pid` is a busy loop still running (not gone, nor a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline") as cmdline:
            return state != "Z" and "getppid" in cmdline.read()
    except OSError:
        return False


def _environment(**extra: str):
    return dict(os.environ, BUSY_PYTHON=sys.executable, **extra)


def test_the_command_runs_beside_the_loops_and_its_status_is_kept():
    command = [str(BUSY), sys.executable, "-c", "import sys; print('ran'); sys.exit(3)"]
    result = subprocess.run(
        command, env=_environment(BUSY_LOOPS="2"), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 3 and result.stdout == "ran\n"
    loops = _loops(result.stderr)
    assert len(loops) == 2
    assert not [pid for pid in loops if _running(pid)]  # stopped before the script ended


def _wait_until(condition, what: str) -> None:
    """A hang guard, not a timing bound: each loop checks its parent at every turn."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_loops_end_when_the_script_is_killed():
    # The command waits for its stdin to close: it ends when this test says so.
    command = [str(BUSY), sys.executable, "-c", "import sys; sys.stdin.read()"]
    script = subprocess.Popen(
        command,
        env=_environment(BUSY_LOOPS="2"),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        loops = _loops(script.stderr.readline())
        _wait_until(lambda: all(_running(pid) for pid in loops), "the loops did not start")
        script.send_signal(signal.SIGKILL)
        script.wait()
        _wait_until(lambda: not any(_running(pid) for pid in loops), "a loop outlived its script")
    finally:
        script.stdin.close()
        script.stderr.close()
