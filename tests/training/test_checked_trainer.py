"""`elmoc_checked_gradient_descent`, the downstream configs' trainer: quiet as `elmoc_gradient_descent` (issue #48:
downstream training printed the first batch's tensors and torch's CUDA autocast warnings)."""

import warnings

import torch

from allennlp.training.callbacks import ConsoleLoggerCallback

from elmoc_allennlp.training.checked_trainer import CheckedGradientDescentTrainer
from tests.training.toy_models import toy_trainer


def _trainer(tmp_path, trainer_type="elmoc_checked_gradient_descent", **settings):
    return toy_trainer(tmp_path, trainer_type, **settings)


def _console_loggers(trainer):
    return [
        callback for callback in trainer._callbacks if isinstance(callback, ConsoleLoggerCallback)
    ]


def test_the_first_batch_is_logged_only_when_asked(tmp_path):
    trainer = _trainer(tmp_path / "default")
    assert isinstance(trainer, CheckedGradientDescentTrainer)
    (default,) = _console_loggers(trainer)
    assert default._should_log_inputs is False
    asked = _trainer(
        tmp_path / "asked", callbacks=[{"type": "console_logger", "should_log_inputs": True}]
    )
    assert [logger._should_log_inputs for logger in _console_loggers(asked)] == [True]
    # allennlp's own trainer is unchanged.
    (stock,) = _console_loggers(_trainer(tmp_path / "stock", "gradient_descent"))
    assert stock._should_log_inputs is True


def _autocast_warnings(trainer):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    return [
        str(warning.message)
        for warning in caught
        if "autocast" in str(warning.message) or "CUDA" in str(warning.message)
    ]


def test_training_on_cpu_shows_no_cuda_autocast_warning(tmp_path):
    assert _autocast_warnings(_trainer(tmp_path / "checked")) == []
    if (
        not torch.cuda.is_available()
    ):  # what allennlp's own trainer shows on CPU (torch 1.12 and 2.x)
        assert _autocast_warnings(_trainer(tmp_path / "stock", "gradient_descent"))
