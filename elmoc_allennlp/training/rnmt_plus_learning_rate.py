"""
The RNMT+ learning-rate schedule (Chen et al., ACL 2018, "The Best of Both Worlds", section 4.1),
used to pretrain ELMo-C, in two forms: the published formula (`rnmt_plus`) and the variant the
ELMo-C authors train with, scaled by the global batch size as their code does (`elmoc_rnmt_plus`).

Terms used here:

* a **step** is one optimizer update (allennlp's batch count, which `step_batch` receives);
* the **global batch** `B` is the number of instances that one step learns from, summed over all
  data-parallel workers: `batch_size` (per worker) x the number of workers. In the ELMo-C
  configs an instance is one window of 20 tokens (the authors' `bptt`), as in the authors'
  training loop, whose `batch_size` counts such windows.
"""
import logging
import math
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from allennlp.common.checks import ConfigurationError
from allennlp.training.learning_rate_schedulers.learning_rate_scheduler import (
    LearningRateScheduler,
)


logger = logging.getLogger(__name__)

FORMULAS = ("rnmt_plus", "authors")

# The ELMo-C authors' constants (GitHub uclanlp/ELMO-C): `stand_alone_scripts/parse_config.py`
# sets n = base_ratio * batch_size / 128 and the decay steps int(400000000 / batch_size * ratio)
# with `decay_ratio` 0.4 and `end_decay_ratio` 2.0 from `config.json` ("optimizer"), whose
# `warmup` is 10000.
AUTHORS_REFERENCE_BATCH_SIZE = 128
AUTHORS_DECAY_SCALE = 400_000_000
AUTHORS_DECAY_START_RATIO = 0.4
AUTHORS_DECAY_END_RATIO = 2.0
AUTHORS_WARMUP_STEPS = 10000


def data_parallel_workers() -> int:
    """The number of data-parallel processes: `torch.distributed`'s world size, else 1."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


@LearningRateScheduler.register("elmoc_rnmt_plus_steps")
@LearningRateScheduler.register("elmoc_rnmt_plus", constructor="from_global_batch")
class RnmtPlusLearningRate(LearningRateScheduler):
    """
    The RNMT+ schedule: a linear warm-up, a plateau at `n * lr0`, then an exponential decay that
    reaches `lr0 / 2` at the end of the decay, after which the learning rate stays `lr0 / 2`.
    `lr0` is the learning rate the optimizer was configured with (per parameter group), `t` the
    number of steps (optimizer updates) taken, `p = warmup_steps`, `s = decay_start`,
    `e = decay_end` and `n = num_replicas`. Two formulas are available (`formula`):

    * `"rnmt_plus"`, as published (Chen et al. 2018, eq. 1):
      `lr(t) = lr0 * min(1 + t * (n - 1) / (n * p), n, n * (2 * n) ** ((s - n * t) / (e - s)))`.
      `s` and `e` are compared with `n * t`, and with `n = 1` there is no warm-up.
    * `"authors"`, the ELMo-C authors' `NoamOpt_ADAM.rate` (`source/models/optimizers.py` of
      GitHub uclanlp/ELMO-C):
      `lr(t) = lr0 * min(1 + t * (n - 1) / p, n, n * (2 * n) ** ((s - t) / (e - s)))` for
      `t < e`, and `lr0 / 2` from `t = e` on. The warm-up is `n` times faster and `s`, `e` are
      plain step counts; `n` need not be an integer.

    With `p = 0` the warm-up term is left out. The learning rate is never below
    `min_learning_rate`.

    Registered as a `LearningRateScheduler` with name "elmoc_rnmt_plus_steps" (the arguments
    below), and
    with name "elmoc_rnmt_plus" for the authors' set-up, computed from the global batch size
    (see `from_global_batch`): in their code `lr0 = 1e-4` and `n = B / 128`, and the decay runs
    from step `0.4 * 4e8 / B` to step `2.0 * 4e8 / B`, i.e. over a fixed number of instances
    whatever the batch size.

    The schedule is batch-wise: `step_batch()` sets the learning rates before each optimizer
    update (allennlp passes the 1-based number of that update, as the authors' loop does),
    `step()` (called at the end of each epoch) does nothing. The step count is saved by
    `state_dict()`, so a run recovered from a checkpoint continues the schedule where it stopped.

    # Parameters

    optimizer : `torch.optim.Optimizer`
        This argument does not get an entry in a configuration file for the object.
    warmup_steps : `int`, required
        `p` in the formula. `0` means no warm-up.
    decay_start : `int`, required
        `s` in the formula.
    decay_end : `int`, required
        `e` in the formula. Must be greater than `decay_start`.
    num_replicas : `float`, optional (default = `1`)
        `n` in the formula: the peak learning rate is `n * lr0`. For `"rnmt_plus"` the number of
        model replicas (an integer >= 1); for `"authors"` any positive number (`B / 128`).
    formula : `str`, optional (default = `"rnmt_plus"`)
        `"rnmt_plus"` (published) or `"authors"` (ELMo-C's code), see above.
    min_learning_rate : `float`, optional (default = `0.0`)
        A floor for the learning rate of every parameter group.
    last_epoch : `int`, optional (default = `-1`)
        The number of steps already taken, `-1` for a fresh start.

    # Example

    ```json
    "learning_rate_scheduler": {
        "type": "elmoc_rnmt_plus_steps",
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
        num_replicas: float = 1,
        formula: str = "rnmt_plus",
        min_learning_rate: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if formula not in FORMULAS:
            raise ConfigurationError(
                f"rnmt_plus: formula must be one of {list(FORMULAS)}, got {formula!r}"
            )
        if warmup_steps < 0:
            raise ConfigurationError(f"rnmt_plus: warmup_steps must be >= 0, got {warmup_steps}")
        if decay_start < 0:
            raise ConfigurationError(f"rnmt_plus: decay_start must be >= 0, got {decay_start}")
        if decay_end <= decay_start:
            raise ConfigurationError(
                f"rnmt_plus: decay_end must be greater than decay_start ({decay_start}), "
                f"got {decay_end}"
            )
        if formula == "rnmt_plus" and (num_replicas < 1 or num_replicas != int(num_replicas)):
            raise ConfigurationError(
                f"rnmt_plus: num_replicas must be an integer >= 1, got {num_replicas}"
            )
        if not num_replicas > 0:  # also rejects NaN
            raise ConfigurationError(f"rnmt_plus: num_replicas must be > 0, got {num_replicas}")
        if not min_learning_rate >= 0.0:
            raise ConfigurationError(
                f"rnmt_plus: min_learning_rate must be >= 0, got {min_learning_rate}"
            )
        self.warmup_steps = warmup_steps
        self.decay_start = decay_start
        self.decay_end = decay_end
        self.num_replicas = num_replicas
        self.formula = formula
        self.min_learning_rate = min_learning_rate
        super().__init__(optimizer, last_epoch=last_epoch)
        self._set_learning_rates()

    @classmethod
    def from_global_batch(
        cls,
        optimizer: torch.optim.Optimizer,
        batch_size: Optional[int] = None,
        world_size: Optional[int] = None,
        warmup_steps: int = AUTHORS_WARMUP_STEPS,
        decay_start_instances: float = AUTHORS_DECAY_START_RATIO * AUTHORS_DECAY_SCALE,
        decay_end_instances: float = AUTHORS_DECAY_END_RATIO * AUTHORS_DECAY_SCALE,
        reference_batch_size: int = AUTHORS_REFERENCE_BATCH_SIZE,
        min_learning_rate: float = 0.0,
        last_epoch: int = -1,
    ) -> "RnmtPlusLearningRate":
        """
        The ELMo-C authors' schedule for a global batch of `B` instances per step:
        `formula = "authors"`, `n = B / reference_batch_size`, `s = int(decay_start_instances /
        B)`, `e = int(decay_end_instances / B)` (the defaults are the authors' constants: `n = B
        / 128`, decay from 1.6e8 to 8e8 instances, warm-up 10,000 steps). With the optimizer's
        `lr = 1e-4` (their `base_scale`) the peak learning rate is `1e-4 * B / 128`. Registered
        as "elmoc_rnmt_plus".

        `B` comes from the `elmoc_gradient_descent` trainer (`set_global_batch`): the data
        loader's batch size x `num_gradient_accumulation_steps` x the world size, so that
        overriding the loader's batch size or the number of workers cannot leave the schedule
        behind. With another trainer, `batch_size` must be given and `B = batch_size x
        world_size`.

        # Parameters

        batch_size : `int`, optional (default = `None`)
            Not needed with `elmoc_gradient_descent`; if given there, it must be the loader's
            batch size x the accumulation steps, or the trainer raises a `ConfigurationError`.
        world_size : `int`, optional (default = `None`)
            With `batch_size`: the number of data-parallel workers; `None` reads it from
            `torch.distributed` (1 when training is not distributed).
        warmup_steps : `int`, optional (default = `10000`)
        decay_start_instances : `float`, optional (default = `1.6e8`)
            The decay starts after this many instances (global), i.e. at step `int(... / B)`.
        decay_end_instances : `float`, optional (default = `8e8`)
        reference_batch_size : `int`, optional (default = `128`)
            The global batch size at which `n = 1`.
        min_learning_rate : `float`, optional (default = `0.0`)
        last_epoch : `int`, optional (default = `-1`)
        """
        for name, value in (("batch_size", batch_size), ("reference_batch_size", reference_batch_size)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"elmoc_rnmt_plus: {name} must be a positive integer, got {value!r}")
        if world_size is not None and (
            isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1
        ):
            raise ConfigurationError(
                f"elmoc_rnmt_plus: world_size must be a positive integer or null, got {world_size!r}"
            )
        # Placeholders until `set_global_batch`.
        scheduler = cls(
            optimizer,
            warmup_steps=warmup_steps,
            decay_start=0,
            decay_end=1,
            formula="authors",
            min_learning_rate=min_learning_rate,
            last_epoch=last_epoch,
        )
        scheduler._instances = (decay_start_instances, decay_end_instances, reference_batch_size)
        scheduler.global_batch = None
        if batch_size is not None:
            scheduler.set_global_batch(
                batch_size * (world_size or data_parallel_workers()), from_trainer=False
            )
        return scheduler

    def set_global_batch(self, global_batch: int, from_trainer: bool = True) -> None:
        """
        Sets `B` (instances per optimizer step, all workers) of an "elmoc_rnmt_plus" schedule:
        `n`, the decay steps. Called by the `elmoc_gradient_descent` trainer.
        """
        if not hasattr(self, "_instances"):
            return  # "elmoc_rnmt_plus_steps": explicit steps
        if from_trainer and self.global_batch is not None:
            if global_batch != self.global_batch:
                raise ConfigurationError(
                    f"trainer.learning_rate_scheduler.batch_size gives a global batch of "
                    f"{self.global_batch}, but the loader's batch size x "
                    f"num_gradient_accumulation_steps x world size is {global_batch}: leave "
                    "learning_rate_scheduler.batch_size out (the trainer derives it)"
                )
            return
        decay_start_instances, decay_end_instances, reference_batch_size = self._instances
        self.global_batch = global_batch
        self.num_replicas = global_batch / reference_batch_size
        self.decay_start = int(decay_start_instances / global_batch)
        self.decay_end = int(decay_end_instances / global_batch)
        if self.decay_end <= self.decay_start:
            raise ConfigurationError(
                f"elmoc_rnmt_plus: a global batch of {global_batch} leaves no decay steps "
                f"(decay_start_instances {decay_start_instances}, decay_end_instances "
                f"{decay_end_instances})"
            )
        if 2 * self.num_replicas <= 1:
            logger.warning(
                "elmoc_rnmt_plus: with a global batch of %d (n = %g) the authors' decay term does "
                "not decrease; the learning rate drops to lr0 / 2 at step %d",
                global_batch,
                self.num_replicas,
                self.decay_end,
            )
        logger.info(
            "elmoc_rnmt_plus: global batch %d: n = %g, warm-up %d steps, decay from step %d to "
            "step %d",
            global_batch,
            self.num_replicas,
            self.warmup_steps,
            self.decay_start,
            self.decay_end,
        )
        self._set_learning_rates()

    def learning_rate_factor(self, step: int) -> float:
        """
        The multiplier of `lr0` after `step` steps (before the `min_learning_rate` floor).
        """
        n = self.num_replicas
        t = max(step, 0)
        if self.formula == "authors":
            if t >= self.decay_end:
                return 0.5
            warmup_slope = (n - 1) / self.warmup_steps if self.warmup_steps else None
            decay_position = t
        else:
            warmup_slope = (n - 1) / (n * self.warmup_steps) if self.warmup_steps else None
            # Held once n * t reaches decay_end.
            decay_position = min(n * t, self.decay_end)
        warmup = float(n) if warmup_slope is None else 1.0 + t * warmup_slope
        # With 2n > 1 the decay term is >= n before decay_start, so it only needs computing after
        # it (which also keeps `(2n) ** large` from overflowing).
        if decay_position <= self.decay_start and 2 * n >= 1:
            decay = float(n)
        else:
            exponent = (self.decay_start - decay_position) / (self.decay_end - self.decay_start)
            decay = n * math.pow(2 * n, exponent)
        return min(warmup, float(n), decay)

    def get_values(self) -> List[float]:
        factor = self.learning_rate_factor(self.last_epoch)
        return [max(base * factor, self.min_learning_rate) for base in self.base_values]

    def step(self, metric: float = None) -> None:
        # The schedule is per batch, see `step_batch`.
        pass

    def step_batch(self, batch_num_total: int = None) -> None:
        if getattr(self, "global_batch", 0) is None:
            raise ConfigurationError(
                "elmoc_rnmt_plus does not know the global batch: train with the "
                "elmoc_gradient_descent trainer (which derives it) or set "
                "learning_rate_scheduler.batch_size"
            )
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
