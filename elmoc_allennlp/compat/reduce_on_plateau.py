"""
allennlp 2.10's `reduce_on_plateau` learning-rate scheduler, working with current PyTorch.

allennlp passes `verbose` to `torch.optim.lr_scheduler.ReduceLROnPlateau`, which PyTorch has
removed, so every config with `"learning_rate_scheduler": {"type": "reduce_on_plateau"}` (e.g.
allennlp-models' ESIM and coreference recipes) fails with a `TypeError` under the PyTorch this
project installs. Importing this module (as `--include-package elmoc_allennlp` does) registers a
replacement under the same name, with the same parameters, which passes `verbose` only to
PyTorch versions that still accept it.
"""
import inspect
import logging
from typing import List, Union

import torch

from allennlp.training.learning_rate_schedulers.learning_rate_scheduler import (
    LearningRateScheduler,
    _PyTorchLearningRateSchedulerWithMetricsWrapper,
)
from allennlp.training.optimizers import Optimizer

logger = logging.getLogger(__name__)

_ACCEPTS_VERBOSE = (
    "verbose" in inspect.signature(torch.optim.lr_scheduler.ReduceLROnPlateau).parameters
)


@LearningRateScheduler.register("reduce_on_plateau", exist_ok=True)
class ReduceOnPlateauLearningRateScheduler(_PyTorchLearningRateSchedulerWithMetricsWrapper):
    """
    Wrapper for PyTorch's `ReduceLROnPlateau`, as allennlp's scheduler of the same name (same
    parameters); `verbose` is ignored by PyTorch versions that no longer have it.

    Registered as a `LearningRateScheduler` with name "reduce_on_plateau" (replacing allennlp's).

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
