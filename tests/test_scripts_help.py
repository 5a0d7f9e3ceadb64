"""
Every script in benchmarks/, examples/ and scripts/ imports and answers `--help`, run as its
documented module (`python -m benchmarks.output_layers`, from the repository root).
"""
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    path
    for folder in ("benchmarks", "examples", "scripts")
    for path in (REPO_ROOT / folder).rglob("*.py")
    if path.name != "__init__.py" and "if __name__ == \"__main__\":" in path.read_text()
)


def test_every_runnable_script_is_found():
    names = {path.relative_to(REPO_ROOT).as_posix() for path in SCRIPTS}
    assert {"scripts/quickstart.py", "benchmarks/fasttext_integrity.py"} <= names
    assert "examples/equal_compute_study/run_study.py" in names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.relative_to(REPO_ROOT).as_posix() for p in SCRIPTS])
def test_script_answers_help(script):
    module = script.relative_to(REPO_ROOT).with_suffix("").as_posix().replace("/", ".")
    completed = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "usage:" in completed.stdout
