"""
allennlp 2.10's `reduce_on_plateau` learning-rate scheduler, working with current PyTorch.

**Problem (allennlp 2.10.1).** allennlp passes `verbose` to
`torch.optim.lr_scheduler.ReduceLROnPlateau`, which PyTorch has removed, so every config with
`"learning_rate_scheduler": {"type": "reduce_on_plateau"}` (e.g. allennlp-models' ESIM and
coreference recipes, and the downstream configs here) fails with a `TypeError` under the PyTorch
this project installs. This must hold for any config a user trains with the plugin loaded, so it
is installed at import.

**Workaround.** `install()` registers a replacement under the same name, with the same
parameters, which passes `verbose` only to PyTorch versions that still accept it. Under a PyTorch
that accepts `verbose` it replaces nothing.

**To drop it**: once the installed PyTorch accepts `verbose` again, or allennlp is patched, remove
this module and its entry in `elmoc_allennlp.compat.SHIMS`.
"""
import inspect
import logging
from typing import List, Union

import torch

from allennlp.common import Registrable
from allennlp.training.learning_rate_schedulers.learning_rate_scheduler import (
    LearningRateScheduler,
    _PyTorchLearningRateSchedulerWithMetricsWrapper,
)
from allennlp.training.optimizers import Optimizer

logger = logging.getLogger(__name__)

REPLACES = "LearningRateScheduler 'reduce_on_plateau' without PyTorch's removed `verbose`"
NAME = "reduce_on_plateau"
TARGETS = (
    "allennlp.training.learning_rate_schedulers.learning_rate_scheduler."
    f"LearningRateScheduler['{NAME}']",
)

_ACCEPTS_VERBOSE = (
    "verbose" in inspect.signature(torch.optim.lr_scheduler.ReduceLROnPlateau).parameters
)


class ReduceOnPlateauLearningRateScheduler(_PyTorchLearningRateSchedulerWithMetricsWrapper):
    """
    Wrapper for PyTorch's `ReduceLROnPlateau`, as allennlp's scheduler of the same name (same
    parameters); `verbose` is ignored by PyTorch versions that no longer have it.

    Registered as a `LearningRateScheduler` with name "reduce_on_plateau", replacing allennlp's,
    by `install()` when PyTorch needs it.

    # Parameters

    optimizer : `torch.optim.Optimizer`
        Not given in a configuration file.
    mode : `str`, optional (default = `"min"`)
    factor : `float`, optional (default = `0.1`)
    patience : `int`, optional (default = `10`)
    verbose : `bool`, optional (default = `False`)
    threshold_mode : `str`, optional (default = `"rel"`)
    threshold : `float`, optional (default = `1e-4`)
    cooldown : `int`, optional (default = `0`)
    min_lr : `Union[float, List[float]]`, optional (default = `0`)
    eps : `float`, optional (default = `1e-8`)
    """

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        verbose: bool = False,
        threshold_mode: str = "rel",
        threshold: float = 1e-4,
        cooldown: int = 0,
        min_lr: Union[float, List[float]] = 0,
        eps: float = 1e-8,
    ) -> None:
        options = dict(
            mode=mode,
            factor=factor,
            patience=patience,
            threshold_mode=threshold_mode,
            threshold=threshold,
            cooldown=cooldown,
            min_lr=min_lr,
            eps=eps,
        )
        if _ACCEPTS_VERBOSE:
            options["verbose"] = verbose
        elif verbose:
            logger.info("This PyTorch's ReduceLROnPlateau has no `verbose`; ignoring it")
        super().__init__(torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **options))


def install() -> bool:
    """
    Registers `ReduceOnPlateauLearningRateScheduler` as "reduce_on_plateau" if this PyTorch lacks
    `verbose`. Idempotent.
    """
    if _ACCEPTS_VERBOSE:
        return False
    # Written to the registry directly: `register(..., exist_ok=True)` would log a misleading
    # "overwriting" line; the plugin names its replacements in one line instead.
    Registrable._registry[LearningRateScheduler][NAME] = (
        ReduceOnPlateauLearningRateScheduler,
        None,
    )
    return True
