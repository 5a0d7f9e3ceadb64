"""
allennlp's `reduce_on_plateau`, registered again: passes `verbose` only to a PyTorch that has it
(docs/compat.md).
"""

import inspect
from typing import List, Union

import torch

from allennlp.common import Registrable
from allennlp.training.learning_rate_schedulers.learning_rate_scheduler import (
    LearningRateScheduler,
    _PyTorchLearningRateSchedulerWithMetricsWrapper,
)
from allennlp.training.optimizers import Optimizer

REPLACES = "LearningRateScheduler 'reduce_on_plateau' without PyTorch's removed `verbose`"
NAME = "reduce_on_plateau"
TARGETS = (
    f"allennlp.training.learning_rate_schedulers.learning_rate_scheduler.LearningRateScheduler['{NAME}']",
)

_ACCEPTS_VERBOSE = (
    "verbose" in inspect.signature(torch.optim.lr_scheduler.ReduceLROnPlateau).parameters
)


class ReduceOnPlateauLearningRateScheduler(_PyTorchLearningRateSchedulerWithMetricsWrapper):
    """
    allennlp's `reduce_on_plateau` (registered under that name by `install()`); `verbose` is
    ignored by a PyTorch that no longer has it.

    # Parameters

    optimizer : `torch.optim.Optimizer`
        The trainer's optimizer (given by allennlp, not in the config).
    mode : `str`, optional (default = `"min"`)
        `"max"`: the metric should rise; `"min"`: it should fall. allennlp steps the scheduler with
        the trainer's validation score signed so that higher is better (`"-loss"` gives the negated
        loss), so `"max"` is right with allennlp's trainers (the recipes' ESIM and coreference
        configs set it); `"min"`, torch's default, would reduce the rate while the model improves.
    factor : `float`, optional (default = `0.1`)
        What the learning rate is multiplied by on a plateau (torch's default, as all the defaults
        here).
    patience : `int`, optional (default = `10`)
        Epochs without improvement tolerated before the rate is reduced.
    verbose : `bool`, optional (default = `False`)
        Print each reduction; ignored (the reductions are not printed) by a PyTorch that removed it.
    threshold_mode : `str`, optional (default = `"rel"`)
        `"rel"`: an improvement is relative to the best value (`best * (1 - threshold)` in `"min"`
        mode); `"abs"`: absolute (`best - threshold`).
    threshold : `float`, optional (default = `1e-4`)
        The smallest change that counts as an improvement, in `threshold_mode`'s terms.
    cooldown : `int`, optional (default = `0`)
        Epochs after a reduction during which no plateau is counted.
    min_lr : `Union[float, List[float]]`, optional (default = `0`)
        The lowest learning rate, for all parameter groups or one per group.
    eps : `float`, optional (default = `1e-8`)
        A reduction smaller than this is not made.
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
        super().__init__(torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **options))


def install() -> bool:
    if _ACCEPTS_VERBOSE:
        return False
    # Not `register(..., exist_ok=True)`, which logs an "overwriting" line of its own.
    Registrable._registry[LearningRateScheduler][NAME] = (
        ReduceOnPlateauLearningRateScheduler,
        None,
    )
    return True
