"""
What a user sees on the console: one per-direction `loss` under one name (progress bar,
metrics.json, `allennlp evaluate`), the final metrics of `allennlp evaluate` in full (with the opt-in
switch), no tensors or CPU autocast warnings from training, and the quickstart's training detail in
the log file only.

Training and the quickstart run in a fresh `allennlp` process (what reaches the console depends on
the logging that process sets up); `allennlp evaluate` runs in this one, through allennlp's
`main`, its stdout captured.
"""

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from allennlp.commands import main
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.hardening import hardened_everywhere
from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO_ROOT / "tests" / "fixtures" / "elmoc_tiny.jsonnet"


def _allennlp(*arguments: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return run_python(
        ["-m", "allennlp", *arguments, "--include-package", "elmoc_allennlp"],
        env=environment,
        timeout=300,
    )


def _evaluate_in_process(monkeypatch, *arguments: str) -> None:
    """
    `allennlp evaluate ARGUMENTS --include-package elmoc_allennlp` with the opt-in switch on (its
    `evaluate_summary` prints the final metrics), in this process: the switch for this call only,
    and the loggers the command turns off or down are put back afterwards.
    """
    monkeypatch.setattr(
        sys, "argv", ["allennlp", "evaluate", *arguments, "--include-package", "elmoc_allennlp"]
    )
    for name in (
        "allennlp.common.params",
        "allennlp.nn.initializers",
        "allennlp.modules.token_embedders.embedding",
    ):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "disabled", logger.disabled)
        monkeypatch.setattr(logger, "level", logger.level)
    with hardened_everywhere():
        main(prog="allennlp")


def _bar_values(stderr: str, name: str) -> List[float]:
    """Every value of `name` in the progress bars' descriptions, in order."""
    return [float(value) for value in re.findall(rf"(?<![\w]){name}: (-?[\d.]+)", stderr)]


# A drawing of a bar that knows its length (the trainer's: "desc ||:  40%|####  | 2/5 [..."), not
# of one that counts alone ("loading instances: 35it [...", drawn in between by the data loader).
_COUNTED_DRAWING = re.compile(r"\| (\d+)/\d+ \[")


def _counted_bars(stderr: str) -> List[List[str]]:
    """
    The drawings of each bar of known length, bar by bar. How often tqdm redraws a bar depends on
    the clock (at most every 0.1 s, and once more when it closes), so on a busy machine a bar is
    drawn more times; but every bar is first drawn at 0 (before its first batch), which is where
    one bar ends and the next begins.
    """
    bars: List[List[str]] = []
    for drawing in re.split(r"[\r\n]", stderr):
        counter = _COUNTED_DRAWING.search(drawing)
        if counter is None:
            continue
        if int(counter.group(1)) == 0 or not bars:
            bars.append([])
        bars[-1].append(drawing)
    return bars


def _printed_metrics(stdout: str) -> Dict[str, str]:
    lines = stdout.splitlines()
    start = lines.index("Final metrics:") + 1
    printed = {}
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        name, value = line.split()
        printed[name] = value
    return printed


@pytest.fixture(scope="module")
def tiny_training(tmp_path_factory):
    """
    A fresh `allennlp train` of the tiny biLM, one epoch: its console output and metrics.json.

    Slow (~3 s, and ~8 s as the first fresh process of its test process, which starts the forkserver
    of `tests/fresh_process.py`): a new `allennlp` process really trains, because what reaches the
    console depends on the logging that process sets up at start.
    """
    serialization_dir = tmp_path_factory.mktemp("console") / "run"
    result = _allennlp(
        "train", str(TINY_CONFIG), "-s", str(serialization_dir), "-o", '{"trainer.num_epochs": 1}'
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result, json.loads((serialization_dir / "metrics.json").read_text())


def test_the_bar_and_metrics_json_show_one_per_direction_loss(tiny_training):
    """
    The progress bar and metrics.json show the loss as the mean of the two directions' losses.

    Slow (up to ~8 s, in the module-scoped `tiny_training` setup): a fresh `allennlp train`
    process trains the tiny biLM an epoch, because the bar checked is that new process's console
    output.
    """
    result, metrics = tiny_training
    for split in ("training", "validation"):
        mean = (metrics[f"{split}_forward_loss"] + metrics[f"{split}_backward_loss"]) / 2
        assert metrics[f"{split}_loss"] == pytest.approx(mean, rel=1e-5)
    # The bar's last `loss` of the epoch is metrics.json's training_loss, then validation's
    # (one epoch: the training bar, then the validation bar, each drawn any number of times).
    training, validation = _counted_bars(result.stderr)
    assert _bar_values(training[-1], "loss") == [pytest.approx(metrics["training_loss"], abs=6e-5)]
    for name in ("forward_loss", "backward_loss", "loss"):
        assert _bar_values(validation[-1], name) == [
            pytest.approx(metrics[f"validation_{name}"], abs=6e-5)
        ], name


def test_training_does_not_dump_tensors_or_warn_about_cuda(tiny_training):
    result, _ = tiny_training
    console = result.stdout + result.stderr
    # allennlp's console_logger logs each tensor of the first batch, one line per row.
    assert not [line for line in console.splitlines() if "batch_input/" in line]
    assert "CUDA is not available" not in console
    assert "torch.cuda.amp.autocast(args...)" not in console


def test_allennlp_evaluate_prints_every_final_metric(elmoc_archive, tmp_path, monkeypatch, capsys):
    output_file = tmp_path / "metrics.json"
    _evaluate_in_process(
        monkeypatch,
        str(elmoc_archive),
        str(REPO_ROOT / "tests" / "fixtures" / "lm_corpus" / "valid.txt"),
        "--output-file",
        str(output_file),
    )
    written = json.loads(output_file.read_text())
    printed = _printed_metrics(capsys.readouterr().out)
    assert set(printed) == set(written)
    for name, value in written.items():
        assert float(printed[name]) == pytest.approx(value, abs=5e-5), name
        if 1e-3 <= abs(value) < 1:
            assert len(printed[name].split(".")[1]) == 4, name
    assert written["loss"] == pytest.approx(
        (written["forward_loss"] + written["backward_loss"]) / 2, rel=1e-5
    )


def test_quickstart_training_detail_goes_to_the_log_file(tmp_path):
    """
    The quickstart's pretraining logs allennlp's detail to out.log, not to the console.

    A fresh process runs the quickstart's `pretrain` for an epoch on the tiny config: what reaches
    the console depends on the logging a new process sets up at start.
    """
    script = REPO_ROOT / "scripts" / "quickstart.py"
    serialization_dir = tmp_path / "run"
    code = (
        "import importlib.util, logging; from pathlib import Path\n"
        "logging.basicConfig(level=logging.WARNING)  # as the script's main()\n"
        f"spec = importlib.util.spec_from_file_location('quickstart', {str(script)!r})\n"
        "quickstart = importlib.util.module_from_spec(spec); spec.loader.exec_module(quickstart)\n"
        "import elmoc_allennlp\n"
        f"quickstart.pretrain(Path({str(serialization_dir)!r}), 1, config=Path({str(TINY_CONFIG)!r}))\n"
    )
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = run_python(["-c", code], env=environment, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    log_lines = (serialization_dir / "out.log").read_text().splitlines()
    parameter_lines = [line for line in log_lines if " - allennlp.common.params - " in line]
    assert len(parameter_lines) > 50
    console_lines = (result.stdout + result.stderr).splitlines()
    assert not [line for line in console_lines if " - INFO - " in line]
    assert (serialization_dir / "model.tar.gz").is_file()


@pytest.mark.parametrize("input_file", ["", "  ", "{valid},", "{missing}"])
def test_allennlp_evaluate_refuses_an_input_naming_no_data(
    elmoc_archive, tmp_path, input_file, monkeypatch, capsys
):
    """An empty input (an unset shell variable), an empty entry, or a path matching no file."""
    valid = REPO_ROOT / "tests" / "fixtures" / "lm_corpus" / "valid.txt"
    input_file = input_file.format(valid=valid, missing=tmp_path / "nowhere" / "valid.txt")
    output_file = tmp_path / "metrics.json"
    # Uncaught, the error ends `allennlp evaluate` with its traceback and a non-zero status.
    with pytest.raises(ConfigurationError) as refused:
        _evaluate_in_process(
            monkeypatch, str(elmoc_archive), input_file, "--output-file", str(output_file)
        )
    named = input_file.rstrip(",") if input_file.strip() else repr(input_file)
    assert named in str(refused.value)
    assert "Final metrics" not in capsys.readouterr().out and not output_file.exists()
