"""
Every script in benchmarks/, examples/ and scripts/ imports and answers `--help`, run as its
documented module (`python -m benchmarks.output_layers`, from the repository root).

One fresh process (`tests/fresh_process.py`) imports allennlp and the plugin once, then forks a
child per script, which runs the module as `__main__` with `--help` (what `python -m MODULE
--help` does after its imports): each script still starts from the same fresh state, without
paying twenty interpreter starts.
"""

import json
import os
from pathlib import Path

import pytest

from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    path
    for folder in ("benchmarks", "examples", "scripts")
    for path in (REPO_ROOT / folder).rglob("*.py")
    if path.name != "__init__.py" and 'if __name__ == "__main__":' in path.read_text()
)
MODULES = [
    script.relative_to(REPO_ROOT).with_suffix("").as_posix().replace("/", ".") for script in SCRIPTS
]

# Runs in a fresh process: `python -m MODULE --help` for each module, each in a forked child.
HELP_RUNNER = r"""
import json, os, sys, tempfile
import time
import torch, allennlp.commands, elmoc_allennlp  # the imports the scripts start with, paid once

results = {}
for module in sys.argv[1:]:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            code = 0
            try:
                import runpy
                sys.argv = [module, "--help"]
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        results[module] = {
            "returncode": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode("utf-8", "replace"),
            "stderr": err.read().decode("utf-8", "replace"),
            "seconds": round(time.perf_counter() - began, 2),
        }
print("\n" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def help_outputs():
    """
    Each script's `--help` run: module -> returncode, stdout, stderr, seconds.

    A fresh process (`tests/fresh_process.py`) imports allennlp and the plugin, then forks a child
    per script, because each script must be run as its documented module.
    """
    completed = run_python(
        ["-c", HELP_RUNNER, *MODULES],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_every_runnable_script_is_found():
    names = {path.relative_to(REPO_ROOT).as_posix() for path in SCRIPTS}
    assert {"scripts/quickstart.py", "benchmarks/fasttext_integrity.py"} <= names
    assert "examples/equal_compute_study/run_study.py" in names


@pytest.mark.parametrize(
    "module", MODULES, ids=[p.relative_to(REPO_ROOT).as_posix() for p in SCRIPTS]
)
def test_script_answers_help(module, help_outputs):
    """
    The script, run as `python -m MODULE --help`, exits 0 and prints its usage.

    One fresh process imports allennlp and the plugin once (the module-scoped `help_outputs`), then
    runs every script in a forked child: a script's imports and parser are only checked by running
    it.
    """
    completed = help_outputs[module]
    assert completed["returncode"] == 0, completed["stderr"][-2000:]
    assert "usage:" in completed["stdout"]
