"""The mixed-precision study (examples/mixed_precision/run_study.py): its loss curve, its table and
the per-variant overrides its downstream runs get, without training."""

import json
from argparse import Namespace

import pytest

from examples import common
from examples.mixed_precision import run_study as study


def test_curve_is_the_mean_of_each_tenth():
    assert study.curve([float(i) for i in range(20)]) == [i * 2 + 0.5 for i in range(10)]
    # A run shorter than ten steps: one point per step.
    assert study.curve([3.0, 1.0]) == [3.0, 1.0]


def _run(precision, validation, losses):
    return {
        "precision": precision,
        "training_seconds": 120.0,
        "steps": len(losses),
        "step_losses": losses,
        "trainer_validation_loss": validation + 0.01,
        "validation_loss": validation,
    }


def test_table_gives_the_difference_to_float32_and_says_when_emulated():
    document = {
        "command": "python -m examples.mixed_precision.run_study",
        "cpu": "a CPU",
        "cpu_bfloat16_flags": "none",
        "threads": 2,
        "config": "training_configs/pretrain/elmoc_small.jsonnet",
        "bfloat16": "emulated (no units)",
        "runs": [_run("float32", 0.4, [1.0] * 10), _run("bfloat16", 0.402, [2.0] * 10)],
        "downstream": {
            "float32": {
                "runs": [{"test": 0.9}, {"test": 0.92}],
                "test_mean": 0.91,
                "test_std": 0.01,
            },
            "frozen biLM int8": {"runs": [{"test": 0.9}], "test_mean": 0.9, "test_std": 0.0},
            "bfloat16 training": {"not_run": study.NEEDS_UNITS},
        },
        "downstream_settings": "10 sentences",
        "seeds": [1, 2],
    }
    text = study.markdown(document)
    assert "| bfloat16 | 10 | 0.4020 | +0.50% | 0.4120 | 2.0 min |" in text
    assert "| float32 | 10 | 0.4000 | +0.00% |" in text
    assert "| 1 | 1.0000 | 2.0000 |" in text
    assert "emulated: its time is no speed figure" in text
    assert "| float32 | 91.00 ± 1.00 | 90.00, 92.00 | +0.00 |" in text
    assert "| frozen biLM int8 | 90.00 ± 0.00 | 90.00 | -1.00 |" in text
    assert f"| bfloat16 training | {study.NEEDS_UNITS} | | |" in text
    document["bfloat16"] = "CPU flags amx_bf16"
    assert "no speed figure" not in study.markdown(document)


def test_a_grid_run_takes_its_variants_overrides(tmp_path, monkeypatch):
    seen = {}

    def fake_run(command, env, **kwargs):
        seen["overrides"] = json.loads(command[command.index("-o") + 1])
        seen["environment"] = env
        run_dir = tmp_path / "runs" / "pos" / "bf16" / "seed3"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.json").write_text(
            json.dumps({"best_validation_accuracy": 0.5, "test_accuracy": 0.6})
        )
        return Namespace(returncode=0)

    monkeypatch.setattr(common.subprocess, "run", fake_run)
    args = Namespace(
        output_dir=tmp_path,
        collect_only=False,
        bilm_dims={"bf16": 12},
        fasttext="ptb.bin",
        fasttext_dim=16,
        epochs=2,
        task_epochs={},
        batch_size=None,
        lowercase=True,
    )
    data = {"pos": {split: tmp_path / split for split in common.SPLITS}}
    result = common.run_one(
        "pos", "bf16", "bilm.tar.gz", 3, args, data, {"trainer.precision": "bfloat16"}
    )
    assert result["test"] == pytest.approx(0.6)
    assert seen["overrides"]["trainer.precision"] == "bfloat16"
    assert seen["overrides"]["random_seed"] == 3  # the grid's own overrides stay
    assert seen["environment"]["ELMOC_DIM"] == "12"
