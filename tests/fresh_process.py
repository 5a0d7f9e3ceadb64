"""
Fresh Python processes for tests whose point is a process nothing else has touched (the plugin
not yet imported, a console's own output, a resource limit, a process that dies), without paying
the third-party imports of each one: about 4.5 of the ~8 CPU-seconds an `allennlp` process
spends before it does anything, on 2 cores that every test shares.

`run_python` has `subprocess.run`'s shape. Its processes are forked by a multiprocessing
"forkserver" that each test process starts once and that has imported only `PRELOADED` (torch,
transformers, spaCy, SciPy, h5py, NLTK): allennlp, the plugin and everything else a process runs
are imported by that process itself, as in a new interpreter. What an interpreter and these modules
read from the environment once, at start (`READ_AT_START`), is the forkserver's: `run_python`
refuses a process that sets any of them otherwise (it starts a real interpreter, `subprocess`),
except OMP_NUM_THREADS, set as torch sets it at start, and PYTHONPATH, whose folders go first on
`sys.path` (after the process's own first entry) as at start; the test process's other `sys.path`
entries stay.
"""

import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

# Imported once by the forkserver: none of them reads the plugin's or allennlp's settings.
PRELOADED = [
    "numpy",
    "torch",
    "scipy.stats",
    "h5py",
    "nltk",
    "spacy",
    "transformers",
    "transformers.models.bert.modeling_bert",
    "transformers.data.data_collator",
]
# Variables (names, or prefixes ending in "_") read once when a process starts: by the C library
# (allocator tunables), the interpreter, or the preloaded modules at import (thread counts, the
# Hugging Face settings).
READ_AT_START = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MALLOC_",
    "GLIBC_TUNABLES",
    "LD_",
    "PYTHON",
    "HF_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
)
# Of those, the ones a forked process can take as a new one would.
SET_IN_PROCESS = ("OMP_NUM_THREADS", "PYTHONPATH")

_context = None
_SYSTEM_TEMPORARY = tempfile.gettempdir()
_started_with: Dict[str, Optional[str]] = {}


def start() -> None:
    """
    Starts this process's forkserver (on the first `run_python`), which imports `PRELOADED`. Its
    socket lives in a folder of this process made then in the system's temporary folder (as it was
    when this module was imported), not in one a test has set and checks or removes.
    """
    global _context
    if _context is None:
        from multiprocessing import forkserver, util

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOADED)
        _started_with.update(_read_at_start(os.environ))
        test_temporary, tempfile.tempdir = tempfile.tempdir, _SYSTEM_TEMPORARY
        try:
            util.get_temp_dir()
            forkserver.ensure_running()
        finally:
            tempfile.tempdir = test_temporary
        _context = context


def _read_at_start(environment: Dict[str, str]) -> Dict[str, str]:
    return {name: value for name, value in environment.items() if name.startswith(READ_AT_START)}


def _child(
    started_with: Dict[str, Optional[str]],
    kind: str,
    what: str,
    argv: List[str],
    cwd: str,
    environment: Dict[str, str],
    limits: Sequence[Tuple[int, int]],
    stdout: str,
    stderr: str,
) -> None:
    """In the forked process: the caller's environment, folder, limits and output files, then run."""
    import runpy

    os.environ.clear()
    os.environ.update(environment)
    tempfile.tempdir = None  # TMPDIR is read again, as a new interpreter reads it
    if environment.get("OMP_NUM_THREADS") != started_with.get("OMP_NUM_THREADS"):
        import torch

        torch.set_num_threads(int(environment["OMP_NUM_THREADS"]))
    folders = [f for f in environment.get("PYTHONPATH", "").split(os.pathsep) if f]
    sys.path[:0] = folders
    os.chdir(cwd)
    # As a new interpreter's: its folder (`-m`) or '' (`-c`) first; the rest is the test process's.
    sys.path.insert(0, cwd if kind == "module" else "")
    for limit, value in limits:
        resource.setrlimit(limit, (value, value))
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = list(argv)
    code = 0
    try:
        if kind == "module":
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        else:
            exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        if not isinstance(exit.code, (int, type(None))):
            print(exit.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # What an interpreter does at exit: its atexit functions (temporary folders removed, ...), then
    # multiprocessing's own clean-up, which runs when this function ends.
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


def run_python(
    arguments: Sequence[str],
    *,
    cwd: Optional[Path] = None,
    env: Optional[Dict[str, str]] = None,
    limits: Sequence[Tuple[int, int]] = (),
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """
    `python -c CODE ARG...` or `python -m MODULE ARG...` (`arguments` as `subprocess.run` would
    take them after `sys.executable`) in a fresh forked process: returns its exit status and
    output as text, as `subprocess.run(..., capture_output=True, text=True)` does; raises
    `subprocess.TimeoutExpired` (the process killed) past `timeout` seconds. `limits` are
    `(resource.RLIMIT_*, value)` pairs set in the process before it runs.
    """
    if len(arguments) < 2 or arguments[0] not in ("-c", "-m"):
        raise ValueError(
            f"run_python takes ['-c', CODE, ...] or ['-m', MODULE, ...], not {arguments}"
        )
    kind = "code" if arguments[0] == "-c" else "module"
    environment = dict(os.environ if env is None else env)
    start()
    context = _context
    asked = _read_at_start(environment)
    changed = sorted(
        name
        for name in set(asked) | set(_started_with)
        if asked.get(name) != _started_with.get(name) and name not in SET_IN_PROCESS
    )
    if "OMP_NUM_THREADS" in _started_with and not asked.get("OMP_NUM_THREADS", "").isdigit():
        changed.append("OMP_NUM_THREADS")
    if changed:
        raise ValueError(
            f"{changed} are read when a process starts: this test needs a new interpreter "
            "(subprocess)"
        )
    argv = ["-c" if kind == "code" else arguments[1], *arguments[2:]]
    with tempfile.TemporaryDirectory() as folder:
        stdout, stderr = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        process = context.Process(
            target=_child,
            args=(
                dict(_started_with),
                kind,
                arguments[1],
                argv,
                str(cwd or os.getcwd()),
                environment,
                list(limits),
            )
            + (stdout, stderr),
        )
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(list(arguments), timeout)
        # No output files: the process failed before it ran (its error went to this one's stderr).
        stdout_text, stderr_text = (
            Path(name).read_text(encoding="utf-8", errors="replace") if Path(name).exists() else ""
            for name in (stdout, stderr)
        )
        return subprocess.CompletedProcess(
            [sys.executable, *arguments], process.exitcode, stdout_text, stderr_text
        )
