"""allennlp's trainer for the plugin's downstream configs: a misspelt key is an error, not ignored."""

from typing import Any, Dict

import torch

from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer

from elmoc_allennlp.common.checks import check_known_keys
from elmoc_allennlp.training.mixed_precision import autocast, training_autocast_dtype
from elmoc_allennlp.training.fast_recovery_trainer import (
    _CONSTRUCTOR,
    _FROM_PARTIAL_OBJECTS,
    _KNOWN_KEYS,
    _quiet_default_console_logger,
    _quiet_disabled_autocast,
)


@Trainer.register("elmoc_checked_gradient_descent", constructor="from_partial_objects")
class CheckedGradientDescentTrainer(GradientDescentTrainer):
    """
    allennlp's `GradientDescentTrainer` for the plugin's downstream configs: a key that is not one of its
    parameters is a `ConfigurationError` naming the key it most probably meant (the stock trainer ignores it);
    as `elmoc_gradient_descent`, the default `console_logger` does not log the first batch's tensors
    (docs/compat.md) and on CPU torch's warnings about allennlp's disabled CUDA autocast are not shown.

    Its parameters are allennlp's `GradientDescentTrainer`'s, taken on unchanged and documented
    there, and one of the plugin's own, below.

    Registered as a `Trainer` with name "elmoc_checked_gradient_descent".

    # Parameters

    precision : `str`, optional (default = `"float32"`)
        `"float32"`, or `"bfloat16"`: mixed-precision training, each batch's forward pass under
        bfloat16 autocast where the device has native bfloat16, else float32 with one line saying
        so (`elmoc_allennlp.training.mixed_precision`, docs/pretraining.md). Not with `use_amp`.
    """

    def __init__(self, *args, precision: str = "float32", **kwargs) -> None:
        check_known_keys(kwargs, _KNOWN_KEYS, "elmoc_checked_gradient_descent", prefix="trainer.")
        bound = _CONSTRUCTOR.bind(self, *args, **kwargs)
        _quiet_default_console_logger(bound.arguments)
        super().__init__(*bound.args[1:], **bound.kwargs)
        self._autocast_dtype = training_autocast_dtype(precision, self.cuda_device, self._use_amp)

    def train(self) -> Dict[str, Any]:
        with _quiet_disabled_autocast(self._use_amp):
            return super().train()

    def batch_outputs(self, batch: Dict[str, Any], for_training: bool) -> Dict[str, torch.Tensor]:
        with autocast(self.cuda_device, self._autocast_dtype):
            return super().batch_outputs(batch, for_training)

    @classmethod
    def from_partial_objects(cls, *args, **kwargs) -> "CheckedGradientDescentTrainer":
        return super().from_partial_objects(*args, **kwargs)  # type: ignore[return-value]

    from_partial_objects.__func__.__signature__ = _FROM_PARTIAL_OBJECTS  # type: ignore[attr-defined]
