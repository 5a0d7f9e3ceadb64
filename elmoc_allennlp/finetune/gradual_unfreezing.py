"""`elmoc_slanted_triangular`: allennlp's slanted triangular schedule, resumable with gradual unfreezing."""

import logging
from typing import Any, Dict, List, Optional

import torch

from allennlp.common.checks import ConfigurationError
from allennlp.training.learning_rate_schedulers import LearningRateScheduler
from allennlp.training.learning_rate_schedulers.slanted_triangular import SlantedTriangular

logger = logging.getLogger(__name__)


@LearningRateScheduler.register("elmoc_slanted_triangular")
class RecoverableSlantedTriangular(SlantedTriangular):
    """
    allennlp's `slanted_triangular` (Howard & Ruder 2018, sections 3.2-3.3), but `load_state_dict`
    (`--recover`) freezes what the restored epoch freezes (allennlp's trains every layer after a
    resume). Per-layer options need the `elmoc_bilm_layerwise` groups; each epoch logs its groups.

    Registered as a `LearningRateScheduler` with name "elmoc_slanted_triangular".

    # Parameters

    optimizer : `torch.optim.Optimizer`
        The trainer's optimizer (given by allennlp, not in the config); with `gradual_unfreezing`
        or `discriminative_fine_tuning`, `elmoc_bilm_layerwise`'s one group per layer, bottom
        first, and an empty last group (anything else is an error saying so).
    num_epochs : `int`
        The epochs of training (given by the trainer from its `num_epochs`). With
        `gradual_unfreezing`, fewer epochs than layer groups leave the bottom groups untrained,
        with a warning.
    num_steps_per_epoch : `int`, optional (default = `None`)
        Optimizer steps per epoch (given by the trainer from its data loader's length). `None`
        (a loader without a length): the first epoch runs at the lowest rate, with a warning.
    cut_frac : `float`, optional (default = `0.1`)
        The fraction of the steps over which the rate rises, in (0, 1); 0.1 is Howard & Ruder's.
    ratio : `int`, optional (default = `32`)
        How much smaller the lowest rate is than the peak (Howard & Ruder's 32).
    last_epoch : `int`, optional (default = `-1`)
        The last epoch done, as torch's schedulers take it: `-1` starts afresh (`--recover` restores
        the schedule through `load_state_dict` instead).
    gradual_unfreezing : `bool`, optional (default = `False`)
        Train only the top group in the first epoch, then one more group each epoch, the rate
        rising and falling within each such epoch (Howard & Ruder, section 3.3).
    discriminative_fine_tuning : `bool`, optional (default = `False`)
        A smaller rate for each group further down: the group above's times `decay_factor`.
    decay_factor : `float`, optional (default = `0.38`)
        The factor of `discriminative_fine_tuning`: 0.38, about 1 / 2.6 (Howard & Ruder, section
        3.2).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        num_epochs: int,
        num_steps_per_epoch: Optional[int] = None,
        cut_frac: float = 0.1,
        ratio: int = 32,
        last_epoch: int = -1,
        gradual_unfreezing: bool = False,
        discriminative_fine_tuning: bool = False,
        decay_factor: float = 0.38,
    ) -> None:
        per_layer = gradual_unfreezing or discriminative_fine_tuning
        groups = optimizer.param_groups
        if per_layer and (len(groups) < 3 or groups[-1]["params"]):
            raise ConfigurationError(
                "trainer.learning_rate_scheduler: gradual_unfreezing and "
                "discriminative_fine_tuning need one parameter group per layer and an empty last "
                "group: use the 'elmoc_bilm_layerwise' optimizer"
            )
        if not 0.0 < cut_frac < 1.0:
            raise ConfigurationError(
                f"trainer.learning_rate_scheduler.cut_frac must be in (0, 1), got {cut_frac}"
            )
        if num_steps_per_epoch is None:
            logger.warning("Without a data loader length the first epoch runs at the lowest rate")
        if gradual_unfreezing and num_epochs < len(groups) - 1:
            logger.warning(
                "Gradual unfreezing with num_epochs = %d leaves the bottom %d group(s) untrained",
                num_epochs,
                len(groups) - 1 - num_epochs,
            )
        super().__init__(
            optimizer,
            num_epochs=num_epochs,
            num_steps_per_epoch=num_steps_per_epoch,
            cut_frac=cut_frac,
            ratio=ratio,
            last_epoch=last_epoch,
            gradual_unfreezing=gradual_unfreezing,
            discriminative_fine_tuning=discriminative_fine_tuning,
            decay_factor=decay_factor,
        )
        self._log_groups()

    def trained_groups(self) -> List[bool]:
        """For each parameter group (but an empty default one), bottom to top: is it trained."""
        groups = self.optimizer.param_groups
        if len(groups) > 1 and not groups[-1]["params"]:
            groups = groups[:-1]
        return [any(parameter.requires_grad for parameter in group["params"]) for group in groups]

    def step(self, metric: float = None) -> None:
        super().step(metric)
        if hasattr(self, "last_batch_num_total"):
            self._log_groups()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if self.gradual_unfreezing:
            # Epoch `last_epoch` trains the top `last_epoch + 1` groups (reversed: the empty default first).
            for index, group in enumerate(reversed(self.optimizer.param_groups)):
                for parameter in group["params"]:
                    parameter.requires_grad = index <= self.last_epoch + 1
        self._log_groups()

    def _log_groups(self) -> None:
        trained = self.trained_groups()
        logger.info(
            "Epoch %d: training parameter groups %s of %d (bottom to top), base learning rates %s",
            self.last_epoch,
            [index for index, flag in enumerate(trained) if flag],
            len(trained),
            ", ".join(f"{value:.3g}" for value in self.base_values[: len(trained)]),
        )
