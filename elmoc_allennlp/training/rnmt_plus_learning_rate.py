"""The RNMT+ learning-rate schedule (Chen et al. 2018), as published and as the authors of ELMo-C use it."""

import logging
import math
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from allennlp.common.checks import ConfigurationError
from allennlp.nn.util import is_distributed
from allennlp.training.learning_rate_schedulers.learning_rate_scheduler import LearningRateScheduler

from elmoc_allennlp.common.checks import check_non_negative, check_one_of, check_positive

logger = logging.getLogger(__name__)

FORMULAS = ("rnmt_plus", "authors")
_KEY = "trainer.learning_rate_scheduler."

# The authors' constants (GitHub uclanlp/ELMO-C): decay from 0.4 x 4e8 to 2.0 x 4e8 instances.
AUTHORS_REFERENCE_BATCH_SIZE = 128
AUTHORS_DECAY_INSTANCES = (1.6e8, 8e8)
AUTHORS_WARMUP_STEPS = 10000


@LearningRateScheduler.register("elmoc_rnmt_plus_steps")
@LearningRateScheduler.register("elmoc_rnmt_plus", constructor="from_global_batch")
@LearningRateScheduler.register("elmoc_rnmt_plus_run", constructor="from_run_length")
class RnmtPlusLearningRate(LearningRateScheduler):
    """
    The RNMT+ schedule, stepped per batch: a linear warm-up, a plateau at `n * lr0`, an exponential
    decay to `lr0 / 2` at `decay_end`, then `lr0 / 2`. With `t` the optimizer steps taken and `p`,
    `s`, `e`, `n` = `warmup_steps`, `decay_start`, `decay_end`, `num_replicas`:

    * `"rnmt_plus"` (Chen et al. 2018, eq. 1):
      `lr(t) = lr0 * min(1 + t * (n - 1) / (n * p), n, n * (2 * n) ** ((s - n * t) / (e - s)))`;
    * `"authors"` (uclanlp/ELMO-C, `NoamOpt_ADAM.rate`):
      `lr(t) = lr0 * min(1 + t * (n - 1) / p, n, n * (2 * n) ** ((s - t) / (e - s)))` for
      `t < e`, and `lr0 / 2` from `t = e` on.

    Registered as a `LearningRateScheduler` with names "elmoc_rnmt_plus_steps", "elmoc_rnmt_plus"
    (the authors' set-up, `from_global_batch`) and "elmoc_rnmt_plus_run" (`from_run_length`).

    # Parameters

    optimizer : `torch.optim.Optimizer`
        The trainer's optimizer (given by allennlp, not in the config); `lr0` is each of its
        parameter groups' initial learning rate.
    warmup_steps : `int`
        `p`, the optimizer steps of the linear warm-up from `lr0` to `n * lr0`; `0` means no
        warm-up.
    decay_start : `int`
        `s`, the step at which the exponential decay starts (non-negative; in the `"rnmt_plus"`
        formula it is compared with `n * t`, as in the paper).
    decay_end : `int`
        `e`, greater than `decay_start`: where the rate reaches `lr0 / 2`.
    num_replicas : `float`, optional (default = `1`)
        `n`, the plateau's multiple of `lr0` (Chen et al.: the number of data-parallel replicas):
        an integer >= 1 for `"rnmt_plus"`, any positive number for `"authors"`. `1`: no plateau
        above `lr0`, hence no warm-up either.
    formula : `str`, optional (default = `"rnmt_plus"`)
        `"rnmt_plus"` (the published schedule) or `"authors"` (the ELMo-C authors' code), above.
    min_learning_rate : `float`, optional (default = `0.0`)
        A floor for every parameter group's learning rate (non-negative; `0.0`: none).
    last_epoch : `int`, optional (default = `-1`)
        The optimizer steps already taken (this scheduler is stepped per batch), `-1` for a fresh
        start; `--recover` restores it through `load_state_dict` instead.
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
        check_one_of(formula, FORMULAS, _KEY + "formula")
        check_non_negative(warmup_steps, _KEY + "warmup_steps")
        check_non_negative(decay_start, _KEY + "decay_start")
        check_positive(num_replicas, _KEY + "num_replicas")
        check_non_negative(min_learning_rate, _KEY + "min_learning_rate")
        if decay_end <= decay_start:
            raise ConfigurationError(f"{_KEY}decay_end must exceed decay_start, got {decay_end}")
        if formula == "rnmt_plus" and (num_replicas < 1 or num_replicas != int(num_replicas)):
            raise ConfigurationError(
                f"{_KEY}num_replicas must be an integer >= 1, got {num_replicas}"
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
        decay_start_instances: float = AUTHORS_DECAY_INSTANCES[0],
        decay_end_instances: float = AUTHORS_DECAY_INSTANCES[1],
        reference_batch_size: int = AUTHORS_REFERENCE_BATCH_SIZE,
        min_learning_rate: float = 0.0,
        last_epoch: int = -1,
    ) -> "RnmtPlusLearningRate":
        """
        The authors' schedule for a global batch of `B` instances (set by `elmoc_gradient_descent`, else
        `batch_size x world_size`): `n = B / reference_batch_size`, `s`, `e` = `int(decay_*_instances / B)`.

        # Parameters

        optimizer : `torch.optim.Optimizer`
            The trainer's optimizer (given by allennlp, not in the config).
        batch_size : `int`, optional (default = `None`)
            Instances per batch on one worker. Not needed with `elmoc_gradient_descent`, which
            sets the global batch from its data loader (if given, it must agree with it); with
            another trainer, required.
        world_size : `int`, optional (default = `None`)
            With `batch_size`: the data-parallel workers; `None` reads `torch.distributed` (1
            outside a distributed run).
        warmup_steps : `int`, optional (default = `10000`)
            `p`, the optimizer steps of the warm-up: the authors' 10,000, whatever the batch.
        decay_start_instances : `float`, optional (default = `1.6e8`)
            Training instances (sentences) seen when the decay starts: `s = int(this / B)`. The
            authors' 0.4 x 4e8.
        decay_end_instances : `float`, optional (default = `8e8`)
            Training instances seen when the rate reaches `lr0 / 2`: `e = int(this / B)`. The
            authors' 2.0 x 4e8.
        reference_batch_size : `int`, optional (default = `128`)
            The global batch at which `n = 1` (the authors' batch); a larger batch plateaus at
            proportionally more than `lr0`.
        min_learning_rate : `float`, optional (default = `0.0`)
            A floor for every parameter group's learning rate (`0.0`: none).
        last_epoch : `int`, optional (default = `-1`)
            The optimizer steps already taken, `-1` for a fresh start.
        """
        check_positive(batch_size, _KEY + "batch_size", allow_none=True)
        check_positive(world_size, _KEY + "world_size", allow_none=True)
        check_positive(reference_batch_size, _KEY + "reference_batch_size")
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
            if world_size is None:
                world_size = dist.get_world_size() if is_distributed() else 1
            scheduler.set_global_batch(batch_size * world_size, from_trainer=False)
        return scheduler

    @classmethod
    def from_run_length(
        cls,
        optimizer: torch.optim.Optimizer,
        num_epochs: int,
        num_steps_per_epoch: Optional[int] = None,
        warmup_fraction: float = 0.0,
        decay_start_fraction: float = 0.5,
        decay_end_fraction: float = 1.0,
        num_replicas: int = 1,
        min_learning_rate: float = 0.0,
        last_epoch: int = -1,
    ) -> "RnmtPlusLearningRate":
        """
        The `"rnmt_plus"` curve placed by fractions of the run's `T = num_epochs x num_steps_per_epoch`
        steps: `p = warmup_fraction * T / n`, `s = decay_start_fraction * n * T`, `e = decay_end_fraction
        * n * T`, rounded (ours: a corpus of any length then decays alike, as fixed steps cannot).

        # Parameters

        optimizer : `torch.optim.Optimizer`
            The trainer's optimizer (given by allennlp, not in the config).
        num_epochs : `int`
            Not given in a configuration file (the trainer's `num_epochs`).
        num_steps_per_epoch : `int`, optional (default = `None`)
            Not given in a configuration file (the trainer's); `None` (no loader length) is an
            error.
        warmup_fraction : `float`, optional (default = `0.0`)
            The fraction of the run's steps spent warming up (before dividing by `n`); `0.0`: no
            warm-up, the rate starts at its plateau.
        decay_start_fraction : `float`, optional (default = `0.5`)
            Where in the run the decay starts, as a fraction of `T`: halfway by default.
        decay_end_fraction : `float`, optional (default = `1.0`)
            Where the rate reaches `lr0 / 2`, greater than `decay_start_fraction` by at least one
            step: by default the run's last step; above 1 the run ends before `lr0 / 2`.
        num_replicas : `int`, optional (default = `1`)
            `n`, as for the class: the plateau's multiple of `lr0`, an integer >= 1.
        min_learning_rate : `float`, optional (default = `0.0`)
            A floor for every parameter group's learning rate (`0.0`: none).
        last_epoch : `int`, optional (default = `-1`)
            The optimizer steps already taken, `-1` for a fresh start.
        """
        check_positive(num_epochs, "trainer.num_epochs")
        if num_steps_per_epoch is None:
            raise ConfigurationError(
                "elmoc_rnmt_plus_run sizes the schedule from the epoch's length, and this data "
                "loader has no len(): use a loader that knows it (elmoc_corpus, allennlp's "
                "multiprocess with a batch_sampler) or elmoc_rnmt_plus_steps with explicit steps"
            )
        check_positive(num_steps_per_epoch, "trainer's steps per epoch (the data loader's length)")
        check_non_negative(warmup_fraction, _KEY + "warmup_fraction")
        check_non_negative(decay_start_fraction, _KEY + "decay_start_fraction")
        check_positive(num_replicas, _KEY + "num_replicas")
        total = num_epochs * num_steps_per_epoch
        decay_start = round(decay_start_fraction * num_replicas * total)
        decay_end = round(decay_end_fraction * num_replicas * total)
        if decay_end <= decay_start:
            raise ConfigurationError(
                f"{_KEY}decay_end_fraction ({decay_end_fraction}) must exceed decay_start_fraction "
                f"({decay_start_fraction}) by at least one of the run's {total} steps"
            )
        scheduler = cls(
            optimizer,
            warmup_steps=round(warmup_fraction * total / num_replicas),
            decay_start=decay_start,
            decay_end=decay_end,
            num_replicas=num_replicas,
            min_learning_rate=min_learning_rate,
            last_epoch=last_epoch,
        )
        scheduler._log_schedule(
            f"elmoc_rnmt_plus_run: {num_epochs} epochs of {num_steps_per_epoch} steps"
        )
        return scheduler

    def set_global_batch(self, global_batch: int, from_trainer: bool = True) -> None:
        """Sets `B` of an "elmoc_rnmt_plus" schedule (called by `elmoc_gradient_descent`)."""
        if not hasattr(self, "_instances"):
            return  # "elmoc_rnmt_plus_steps": explicit steps
        if from_trainer and self.global_batch is not None:
            if global_batch != self.global_batch:
                raise ConfigurationError(
                    f"{_KEY}batch_size gives a global batch of {self.global_batch}, the trainer's is "
                    f"{global_batch}: leave it out"
                )
            return
        decay_start_instances, decay_end_instances, reference_batch_size = self._instances
        self.global_batch = global_batch
        self.num_replicas = global_batch / reference_batch_size
        self.decay_start = int(decay_start_instances / global_batch)
        self.decay_end = int(decay_end_instances / global_batch)
        if self.decay_end <= self.decay_start:
            raise ConfigurationError(
                f"{_KEY}decay_end_instances: a global batch of {global_batch} leaves no decay steps"
            )
        self._log_schedule(f"elmoc_rnmt_plus: global batch {global_batch}")
        self._set_learning_rates()

    def _log_schedule(self, setting: str) -> None:
        steps = (self.warmup_steps, self.decay_start, self.decay_end)
        logger.info(
            "%s: n = %g, warm-up p = %d steps, decay from s = %d to e = %d",
            setting,
            self.num_replicas,
            *steps,
        )

    def get_values(self) -> List[float]:
        steps = (self.warmup_steps, self.decay_start, self.decay_end)
        factor = learning_rate_factor(self.formula, self.num_replicas, *steps, self.last_epoch)
        return [max(base * factor, self.min_learning_rate) for base in self.base_values]

    def step(self, metric: float = None) -> None:
        pass

    def step_batch(self, batch_num_total: int = None) -> None:
        if getattr(self, "global_batch", 0) is None:
            raise ConfigurationError(
                "elmoc_rnmt_plus needs the global batch: use the elmoc_gradient_descent trainer "
                "or set trainer.learning_rate_scheduler.batch_size"
            )
        self.last_epoch = self.last_epoch + 1 if batch_num_total is None else batch_num_total
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


def learning_rate_factor(
    formula: str,
    num_replicas: float,
    warmup_steps: int,
    decay_start: int,
    decay_end: int,
    step: int,
) -> float:
    """The multiplier of `lr0` after `step` steps (before the floor): `RnmtPlusLearningRate`'s formulas."""
    n = num_replicas
    t = max(step, 0)
    if formula == "authors":
        if t >= decay_end:
            return 0.5
        warmup_slope = (n - 1) / warmup_steps if warmup_steps else None
        decay_position = t
    else:
        warmup_slope = (n - 1) / (n * warmup_steps) if warmup_steps else None
        decay_position = min(n * t, decay_end)  # held once n * t reaches decay_end
    warmup = float(n) if warmup_slope is None else 1.0 + t * warmup_slope
    # With 2n >= 1 the decay term is >= n before decay_start: skipped (`(2n) ** large` overflows).
    if decay_position <= decay_start and 2 * n >= 1:
        decay = float(n)
    else:
        exponent = (decay_start - decay_position) / (decay_end - decay_start)
        decay = n * math.pow(2 * n, exponent)
    return min(warmup, float(n), decay)
