"""
`tests/fresh_process.py` gives what a new interpreter would, where the tests rely on it: the
environment, folder, temporary folder, PYTHONPATH, limits, exit status, output and exit-time
clean-up of the process; nothing of the test process; and a refusal where it cannot.
"""

import json
import os
import resource
import subprocess
import sys

import pytest

from tests.fresh_process import run_python

PROBE = r"""
import json, os, sys, tempfile
print(json.dumps({
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "tmp": tempfile.gettempdir(),
    "variable": os.environ.get("ELMOC_PROBE"),
    "first_path": sys.path[:2],
    "loaded": sorted(m for m in ("allennlp", "elmoc_allennlp", "pytest", "tests.conftest")
                     if m in sys.modules),
    "file_limit": __import__("resource").getrlimit(__import__("resource").RLIMIT_FSIZE)[0],
}))
"""


def test_a_process_gets_the_callers_settings_and_nothing_of_this_one(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    environment = dict(
        os.environ, ELMOC_PROBE="yes", TMPDIR=str(tmp_path / "tmp"), PYTHONPATH="/nowhere"
    )
    done = run_python(
        ["-c", PROBE, "a", "b"],
        cwd=tmp_path,
        env=environment,
        limits=[(resource.RLIMIT_FSIZE, 12345)],
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["argv"] == ["-c", "a", "b"] and seen["cwd"] == str(tmp_path)
    assert seen["tmp"] == str(tmp_path / "tmp") and seen["variable"] == "yes"
    assert seen["first_path"] == ["", "/nowhere"]
    assert seen["loaded"] == [] and "elmoc_allennlp" in sys.modules  # this process has them
    assert seen["file_limit"] == 12345


def test_exit_status_output_and_exit_time_clean_up(tmp_path):
    marker = tmp_path / "atexit-ran"
    code = (
        "import atexit, pathlib, sys\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).touch)\n"
        "print('out'); print('err', file=sys.stderr); sys.exit(3)\n"
    )
    done = run_python(["-c", code])
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert marker.exists()
    failed = run_python(["-c", "raise ValueError('planted')"])
    assert failed.returncode == 1 and failed.stderr.strip().endswith("ValueError: planted")
    said = run_python(["-c", "raise SystemExit('said why')"])
    assert (said.returncode, said.stderr) == (1, "said why\n")


def test_a_module_runs_as_main():
    done = run_python(["-m", "json.tool", "--help"])
    assert done.returncode == 0 and "usage:" in done.stdout


def test_a_process_past_its_time_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(["-c", "import time; time.sleep(60)"], timeout=0.5)


@pytest.mark.parametrize(
    "variable, value",
    [("MALLOC_PERTURB_", "128"), ("HF_HUB_OFFLINE", "0"), ("PYTHONHASHSEED", "7")],
)
def test_what_a_new_interpreter_reads_at_start_is_refused(variable, value):
    environment = dict(os.environ, **{variable: value + os.environ.get(variable, "")})
    with pytest.raises(ValueError, match=variable):
        run_python(["-c", "pass"], env=environment)


def test_another_thread_count_is_set_as_torch_sets_it():
    done = run_python(
        ["-c", "import torch; print(torch.get_num_threads())"],
        env=dict(os.environ, OMP_NUM_THREADS="3"),
    )
    assert done.stdout.strip() == "3", done.stderr
