"""The trainers' `precision` option (issue #51): bfloat16 autocast where the device has native
bfloat16, float32 with one line elsewhere, checked names, and a model trained through it."""

import json
import logging
from typing import Dict, List

import pytest
import torch

from allennlp.common.checks import ConfigurationError
from allennlp.models import Model
from allennlp.training import Trainer

from elmoc_allennlp.common import precision
from elmoc_allennlp.training import mixed_precision
from elmoc_allennlp.training.mixed_precision import training_autocast_dtype
from tests.conftest import FIXTURES_ROOT
from tests.training.toy_models import ToyRegression, toy_trainer


@pytest.fixture
def no_bfloat16_units(monkeypatch):
    monkeypatch.delenv(precision.EMULATE_BFLOAT16, raising=False)
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(precision, "torch_cpu_capability", lambda: "AVX2")


class _AutocastRecorder(ToyRegression):
    """The toy regression, recording whether each forward pass ran under CPU autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.autocast_seen: List[bool] = []

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:  # type: ignore
        self.autocast_seen.append(torch.is_autocast_cpu_enabled())
        return super().forward(x, y)


def _trainer(tmp_path, model: Model, trainer_type: str, **settings) -> Trainer:
    return toy_trainer(tmp_path, trainer_type, model, validation=True, **settings)


@pytest.mark.parametrize(
    "trainer_type", ["elmoc_gradient_descent", "elmoc_checked_gradient_descent"]
)
def test_bfloat16_autocasts_training_and_validation_forward_passes(
    tmp_path, monkeypatch, trainer_type
):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    model = _AutocastRecorder()
    trainer = _trainer(tmp_path, model, trainer_type, precision="bfloat16")
    trainer.train()
    # Two training and two validation batches, each under autocast; the weights stay float32.
    assert model.autocast_seen == [True] * 4
    assert all(
        p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters()
    )
    assert not torch.is_autocast_cpu_enabled()


@pytest.mark.parametrize(
    "trainer_type", ["elmoc_gradient_descent", "elmoc_checked_gradient_descent"]
)
def test_without_bfloat16_units_training_is_float32_with_one_line(
    tmp_path, no_bfloat16_units, caplog, trainer_type
):
    model = _AutocastRecorder()
    with caplog.at_level(logging.INFO, logger=mixed_precision.__name__):
        trainer = _trainer(tmp_path, model, trainer_type, precision="bfloat16")
        trainer.train()
    assert model.autocast_seen == [False] * 4
    (record,) = [r for r in caplog.records if r.name == mixed_precision.__name__]
    assert record.levelno == logging.WARNING and "runs in float32" in record.getMessage()
    assert "avx512_bf16" in record.getMessage()  # what the CPU lacks


def test_float32_is_the_default_and_names_are_checked(tmp_path):
    model = _AutocastRecorder()
    _trainer(tmp_path / "default", model, "elmoc_gradient_descent").train()
    assert model.autocast_seen == [False] * 4
    with pytest.raises(ConfigurationError, match="did you mean 'bfloat16'"):
        _trainer(tmp_path / "typo", ToyRegression(), "elmoc_gradient_descent", precision="bfloat61")
    with pytest.raises(ConfigurationError, match='did you mean "trainer.precision"'):
        _trainer(tmp_path / "key", ToyRegression(), "elmoc_gradient_descent", precison="bfloat16")
    with pytest.raises(ConfigurationError, match="int8"):
        # int8 is an inference precision (`dtype`), not a training one.
        training_autocast_dtype("int8", torch.device("cpu"), use_amp=False)


def test_bfloat16_and_use_amp_are_one_or_the_other():
    with pytest.raises(ConfigurationError, match="use_amp"):
        training_autocast_dtype("bfloat16", torch.device("cpu"), use_amp=True)
    assert training_autocast_dtype("float32", torch.device("cpu"), use_amp=True) is None


def test_emulation_switch_gives_bfloat16_on_any_cpu(monkeypatch, no_bfloat16_units):
    assert training_autocast_dtype("bfloat16", torch.device("cpu"), use_amp=False) is None
    monkeypatch.setenv(precision.EMULATE_BFLOAT16, "0")
    assert training_autocast_dtype("bfloat16", torch.device("cpu"), use_amp=False) is None
    monkeypatch.setenv(precision.EMULATE_BFLOAT16, "1")
    assert training_autocast_dtype("bfloat16", torch.device("cpu"), use_amp=False) is torch.bfloat16


def test_tiny_elmoc_pretrains_in_bfloat16_close_to_float32(elmoc_archive, tmp_path, monkeypatch):
    """
    `allennlp train` of the tiny ELMo-C (the session's float32 archive's config and seed) with
    `trainer.precision` bfloat16: the continuous head's map runs in bfloat16, its loss in float32,
    and the validation loss is within 1% of float32's (0.3% seen).
    """
    from allennlp.commands.train import train_model_from_file

    monkeypatch.setenv(precision.EMULATE_BFLOAT16, "1")
    seen: Dict[str, set] = {"map": set(), "loss": set()}
    from elmoc_allennlp.modules.output_layers.continuous_output import ContinuousOutputLayer

    original_score = ContinuousOutputLayer.score

    def recording_score(self, hidden_states, targets):
        output = original_score(self, hidden_states, targets)
        seen["map"].add(self.projection(hidden_states).dtype)
        seen["loss"].add(output["loss"].dtype)
        return output

    monkeypatch.setattr(ContinuousOutputLayer, "score", recording_score)
    model = train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(tmp_path / "run"),
        overrides=json.dumps({"trainer.num_epochs": 1, "trainer.precision": "bfloat16"}),
    )
    assert seen == {"map": {torch.bfloat16}, "loss": {torch.float32}}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    mixed = json.loads((tmp_path / "run" / "metrics.json").read_text())["validation_loss"]
    float32 = json.loads((elmoc_archive.parent / "metrics.json").read_text())["validation_loss"]
    assert mixed == pytest.approx(float32, rel=0.01)
    assert mixed != float32  # the bfloat16 run computed in bfloat16
