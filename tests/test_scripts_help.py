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


def test_layer_cache_benchmark_removes_its_temporary_folder(tmp_path, monkeypatch):
    """Its runs and caches (about 478 MB at the default sizes) go, however the run ends."""
    from benchmarks import layer_cache_speed

    data = tmp_path / "conll2003"
    data.mkdir()
    for name in ("eng.train", "eng.testa"):
        (data / name).write_text("")
    used = []

    def measure(args, work):
        used.append(work)
        (work / "run").mkdir()
        (work / "run" / "weights.th").write_bytes(b"0" * 1024)
        raise KeyboardInterrupt

    monkeypatch.setattr(layer_cache_speed, "measure", measure)
    monkeypatch.setattr(layer_cache_speed.torch, "set_num_threads", lambda threads: None)
    with pytest.raises(KeyboardInterrupt):
        layer_cache_speed.main(["--data", str(data)])
    assert len(used) == 1 and not used[0].exists()
    # A --work-dir is the user's: kept.
    kept = tmp_path / "kept"
    with pytest.raises(KeyboardInterrupt):
        layer_cache_speed.main(["--data", str(data), "--work-dir", str(kept)])
    assert used[1] == kept and (kept / "run" / "weights.th").exists()
