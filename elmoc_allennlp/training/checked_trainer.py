"""allennlp's trainer for the plugin's downstream configs: a misspelt key is an error, not ignored."""

from typing import Any, Dict

from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer

from elmoc_allennlp.common.checks import check_known_keys
from elmoc_allennlp.training.fast_recovery_trainer import (
    _CONSTRUCTOR,
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
    there.

    Registered as a `Trainer` with name "elmoc_checked_gradient_descent".
    """

    def __init__(self, *args, **kwargs) -> None:
        check_known_keys(kwargs, _KNOWN_KEYS, "elmoc_checked_gradient_descent", prefix="trainer.")
        bound = _CONSTRUCTOR.bind(self, *args, **kwargs)
        _quiet_default_console_logger(bound.arguments)
        super().__init__(*bound.args[1:], **bound.kwargs)

    def train(self) -> Dict[str, Any]:
        with _quiet_disabled_autocast(self._use_amp):
            return super().train()
