"""
`--threads N` of the plugin's commands and the quickstart sets torch's intra-op threads of the
command's process (and fastText's, at least 11, where it trains); `OMP_NUM_THREADS` does the same
for `allennlp train`.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from allennlp.commands import main
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.fasttext.training import MIN_THREADS
from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[2]


class _Reached(Exception):
    """Raised where the command's work would start, once the threads are recorded."""


@pytest.fixture
def restore_threads():
    previous = torch.get_num_threads()
    # Not the values the tests ask for: a command that ignored --threads would leave this.
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def _record(seen: dict):
    def stand_in(*args, **kwargs):
        seen["torch"] = torch.get_num_threads()
        seen.update(kwargs)
        raise _Reached

    return stand_in


def _run(monkeypatch, *arguments: str) -> None:
    monkeypatch.setattr(sys, "argv", ["allennlp", *arguments])
    with pytest.raises(_Reached):
        main(prog="allennlp")


@pytest.mark.parametrize("threads", [1, 3])
def test_elmoc_fasttext_threads_set_torch_and_fasttext(
    threads, monkeypatch, tmp_path, restore_threads
):
    from elmoc_allennlp.commands import elmoc_fasttext

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n")
    seen: dict = {}
    monkeypatch.setattr(elmoc_fasttext, "train_fasttext", _record(seen))
    _run(
        monkeypatch,
        "elmoc-fasttext",
        str(corpus),
        str(tmp_path / "v.bin"),
        "--threads",
        str(threads),
    )
    assert seen["torch"] == threads
    # fastText is given the knob; its training uses at least MIN_THREADS (fasttext_training).
    assert seen["thread"] == threads


def test_elmoc_fasttext_default_threads(monkeypatch, tmp_path, restore_threads):
    from elmoc_allennlp.commands import elmoc_fasttext

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n")
    seen: dict = {}
    monkeypatch.setattr(elmoc_fasttext, "train_fasttext", _record(seen))
    _run(monkeypatch, "elmoc-fasttext", str(corpus), str(tmp_path / "v.bin"))
    assert seen["torch"] == 2  # torch's own setting, untouched
    assert seen["thread"] == MIN_THREADS


@pytest.mark.parametrize("threads", [1, 3])
def test_elmoc_embed_threads(threads, monkeypatch, tmp_path, restore_threads):
    from elmoc_allennlp.commands import elmoc_embed

    seen: dict = {}
    monkeypatch.setattr(elmoc_embed, "embed_file", _record(seen))
    _run(
        monkeypatch,
        "elmoc-embed",
        "a.tar.gz",
        "in.txt",
        str(tmp_path / "o.hdf5"),
        "--top",
        "--threads",
        str(threads),
    )
    assert seen["torch"] == threads


@pytest.mark.parametrize("threads", [1, 3])
def test_elmoc_merge_bilm_threads(threads, monkeypatch, tmp_path, restore_threads):
    from elmoc_allennlp.commands import merge_bilm

    seen: dict = {}
    monkeypatch.setattr(merge_bilm, "merge_bilm_archives", _record(seen))
    _run(
        monkeypatch,
        "elmoc-merge-bilm",
        "f.tar.gz",
        "b.tar.gz",
        "-o",
        str(tmp_path / "m.tar.gz"),
        "--threads",
        str(threads),
    )
    assert seen["torch"] == threads


@pytest.mark.parametrize("command", ["elmoc-fasttext", "elmoc-embed", "elmoc-merge-bilm"])
def test_threads_must_be_positive(command, monkeypatch, tmp_path, restore_threads):
    arguments = {
        "elmoc-fasttext": [__file__, str(tmp_path / "v.bin")],
        "elmoc-embed": ["a.tar.gz", "in.txt", str(tmp_path / "o.hdf5"), "--top"],
        "elmoc-merge-bilm": ["f.tar.gz", "b.tar.gz", "-o", str(tmp_path / "m.tar.gz")],
    }[command]
    monkeypatch.setattr(sys, "argv", ["allennlp", command, *arguments, "--threads", "0"])
    with pytest.raises(ConfigurationError, match="--threads must be positive"):
        main(prog="allennlp")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("threads", [1, 3])
def test_quickstart_threads(threads, monkeypatch, tmp_path, restore_threads):
    spec = importlib.util.spec_from_file_location(
        "quickstart", REPO_ROOT / "scripts" / "quickstart.py"
    )
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    seen: dict = {}
    monkeypatch.setattr(quickstart, "check_optional_dependencies", _record(seen))
    monkeypatch.setattr(
        sys, "argv", ["quickstart.py", "--output-dir", str(tmp_path), "--threads", str(threads)]
    )
    with pytest.raises(_Reached):
        quickstart.main()
    assert seen["torch"] == threads


def test_omp_num_threads_limits_torch_under_allennlp():
    """
    The documented `OMP_NUM_THREADS=1 allennlp train ...`: torch's threads once allennlp runs.

    Slow (~9 s): a new interpreter importing torch, allennlp and the plugin, because
    `OMP_NUM_THREADS` is read when torch starts, so only a new process shows its effect; the value
    this test process started with runs in a process of `tests/fresh_process.py`, whose torch
    started with it.
    """
    code = (
        "import allennlp.commands, elmoc_allennlp, torch; "
        "from allennlp.common.util import import_module_and_submodules; "
        "import_module_and_submodules('elmoc_allennlp'); print(torch.get_num_threads())"
    )
    for value in ("1", "2"):
        environment = {**os.environ, "OMP_NUM_THREADS": value}
        if value == os.environ.get("OMP_NUM_THREADS"):
            completed = run_python(["-c", code], env=environment, timeout=300)
        else:
            completed = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                env=environment,
                timeout=300,
            )
        assert completed.returncode == 0, completed.stderr[-2000:]
        assert completed.stdout.split()[-1] == value


def test_plugin_commands_filter_third_party_warnings_while_they_run(
    monkeypatch, tmp_path, restore_threads
):
    import warnings

    from elmoc_allennlp.commands import elmoc_embed

    def warns(*args, **kwargs):
        warnings.warn("User provided device_type of 'cuda', but CUDA is not available", UserWarning)
        warnings.warn(
            "You are using a non-supported Python version (3.10.13). Google will not post ...",
            FutureWarning,
        )
        warnings.warn("the plugin's own", UserWarning)
        raise _Reached

    monkeypatch.setattr(elmoc_embed, "embed_file", warns)
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(monkeypatch, "elmoc-embed", "a.tar.gz", "in.txt", str(tmp_path / "o.hdf5"), "--top")
        assert [str(w.message) for w in caught] == ["the plugin's own"]
        # Outside the command, the same warning is shown: nothing changed process-wide.
        warnings.warn("User provided device_type of 'cuda', but CUDA is not available", UserWarning)
        assert len(caught) == 2
    assert warnings.filters == filters
