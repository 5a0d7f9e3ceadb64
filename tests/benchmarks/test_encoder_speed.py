"""`benchmarks/encoder_speed.py` runs (tiny shape, CPU) and refuses `--device cuda` without CUDA."""

import sys
from pathlib import Path

import pytest
import torch

from benchmarks import encoder_speed

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_measure_prints_every_method_on_cpu():
    shape = encoder_speed.Shape("tiny", 3, 4, 6, 8)
    lines = encoder_speed.measure(shape, 1, 1.0, torch.device("cpu"))
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(encoder_speed.make_methods(shape, torch.device("cpu")))
    assert all(float(row.split("|")[3].replace(",", "")) > 0 for row in rows)  # tokens/s
    assert "peak MB" not in lines[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch, capsys):
    """`python -m benchmarks.encoder_speed --device cuda` without CUDA ends in a clear error."""
    monkeypatch.setattr(sys, "argv", ["encoder_speed.py", "--device", "cuda"])
    with pytest.raises(SystemExit) as exited:
        encoder_speed.main()
    assert exited.value.code != 0
    assert "no CUDA device is available" in capsys.readouterr().err
