"""
The RNMT+ learning-rate schedule (Chen et al., ACL 2018, "The Best of Both Worlds", section 4.1),
used to pretrain ELMo-C.
"""
import math
from typing import Any, Dict, List

import torch

from allennlp.common.checks import ConfigurationError
from allennlp.training.learning_rate_schedulers.learning_rate_scheduler import (
    LearningRateScheduler,
)

from elmoc_allennlp.common.registry_aliases import register_old_name


@LearningRateScheduler.register("elmoc_rnmt_plus")
@register_old_name(LearningRateScheduler, "rnmt_plus")
class RnmtPlusLearningRate(LearningRateScheduler):
    """
    The RNMT+ schedule: a linear warm-up, a plateau, then an exponential decay that halves the
    learning rate by the end of the decay and holds it there. The learning rate after `t` batches is

    `lr(t) = lr0 * min(1 + t * (n - 1) / (n * p), n, n * (2 * n) ** ((s - n * t) / (e - s)))`

    where `lr0` is the learning rate the optimizer was configured with (per parameter group),
    `p = warmup_steps`, `s = decay_start`, `e = decay_end` and `n = num_replicas`. The decay term
    is held at its final value for `n * t >= e`, so the schedule ends at `lr0 / 2`; it is also never
    below `min_learning_rate`. Note that `s` and `e` are compared with `n * t`, and that with
    `n = 1` there is no warm-up (the warm-up term is constantly 1).

    This follows the formula of the RNMT+ paper. The published ELMo-C code uses a variant whose
    warm-up term is `1 + t * (n - 1) / p` (divided by `p` rather than `n * p`), i.e. a warm-up that
    is `n` times faster.

    The schedule is batch-wise: `step_batch()` sets the learning rates, `step()` (called at the end
    of each epoch) does nothing. The step count is saved by `state_dict()`, so a run recovered
    from a checkpoint continues the schedule where it stopped.

    Registered as a `LearningRateScheduler` with name "elmoc_rnmt_plus"
    ("rnmt_plus" in older configs).

    # Parameters

    optimizer : `torch.optim.Optimizer`
        This argument does not get an entry in a configuration file for the object.
    warmup_steps : `int`, required
        `p` in the formula. `0` means no warm-up.
    decay_start : `int`, required
        `s` in the formula: the decay starts when `num_replicas * t` reaches it.
    decay_end : `int`, required
        `e` in the formula: the decay ends (at `lr0 / 2`) when `num_replicas * t` reaches it.
        Must be greater than `decay_start`.
    num_replicas : `int`, optional (default = `1`)
        `n` in the formula: the number of model replicas (data-parallel workers). The peak learning
        rate is `n * lr0`.
    min_learning_rate : `float`, optional (default = `0.0`)
        A floor for the learning rate of every parameter group.
    last_epoch : `int`, optional (default = `-1`)
        The number of batches already taken, `-1` for a fresh start.

    # Example

    ```json
    "learning_rate_scheduler": {
        "type": "elmoc_rnmt_plus",
        "warmup_steps": 500,
        "decay_start": 600000,
        "decay_end": 1200000,
        "num_replicas": 4
    }
    ```
    Note that you do NOT pass an `optimizer` key to the learning rate scheduler.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        warmup_steps: int,
        decay_start: int,
        decay_end: int,
        num_replicas: int = 1,
        min_learning_rate: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if warmup_steps < 0:
            raise ConfigurationError(f"rnmt_plus: warmup_steps must be >= 0, got {warmup_steps}")
        if decay_start < 0:
            raise ConfigurationError(f"rnmt_plus: decay_start must be >= 0, got {decay_start}")
        if decay_end <= decay_start:
            raise ConfigurationError(
                f"rnmt_plus: decay_end must be greater than decay_start ({decay_start}), "
                f"got {decay_end}"
            )
        if num_replicas < 1:
            raise ConfigurationError(f"rnmt_plus: num_replicas must be >= 1, got {num_replicas}")
        if not min_learning_rate >= 0.0:  # also rejects NaN
            raise ConfigurationError(
                f"rnmt_plus: min_learning_rate must be >= 0, got {min_learning_rate}"
            )
        self.warmup_steps = warmup_steps
        self.decay_start = decay_start
        self.decay_end = decay_end
        self.num_replicas = num_replicas
        self.min_learning_rate = min_learning_rate
        super().__init__(optimizer, last_epoch=last_epoch)
        self._set_learning_rates()

    def learning_rate_factor(self, step: int) -> float:
        """
        The multiplier of `lr0` after `step` batches (before the `min_learning_rate` floor).
        """
        n = self.num_replicas
        t = max(step, 0)
        if self.warmup_steps == 0:
            warmup = float(n)
        else:
            warmup = 1.0 + t * (n - 1) / (n * self.warmup_steps)
        # The decay term is >= n before decay_start, so it only needs computing after it (this
        # also keeps `(2n) ** large` from overflowing); it is held once n * t reaches decay_end.
        replica_steps = min(n * t, self.decay_end)
        if replica_steps <= self.decay_start:
            decay = float(n)
        else:
            exponent = (self.decay_start - replica_steps) / (self.decay_end - self.decay_start)
            decay = n * math.pow(2 * n, exponent)
        return min(warmup, float(n), decay)

    def get_values(self) -> List[float]:
        factor = self.learning_rate_factor(self.last_epoch)
        return [max(base * factor, self.min_learning_rate) for base in self.base_values]

    def step(self, metric: float = None) -> None:
        # The schedule is per batch, see `step_batch`.
        pass

    def step_batch(self, batch_num_total: int = None) -> None:
        if batch_num_total is None:
            self.last_epoch += 1
        else:
            self.last_epoch = batch_num_total
        self._set_learning_rates()

    def state_dict(self) -> Dict[str, Any]:
        return {"last_epoch": self.last_epoch, "base_values": list(self.base_values)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.last_epoch = state_dict["last_epoch"]
        self.base_values = list(state_dict["base_values"])
        self._set_learning_rates()

    def _set_learning_rates(self) -> None:
        for param_group, learning_rate in zip(self.optimizer.param_groups, self.get_values()):
            param_group[self.param_group_field] = learning_rate
