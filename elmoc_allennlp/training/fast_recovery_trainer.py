import contextlib
import inspect
import logging
import random
import warnings
from typing import Any, Dict, Iterator, List, Optional

import torch

from allennlp.common.checks import ConfigurationError
from allennlp.training.callbacks import ConsoleLoggerCallback
from allennlp.training.callbacks.callback import TrainerCallback
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer

from elmoc_allennlp.common.checks import check_known_keys, check_positive
from elmoc_allennlp.training.mixed_precision import (
    autocast,
    training_autocast_dtype,
    with_precision_parameter,
)

logger = logging.getLogger(__name__)

_CONSTRUCTOR = inspect.signature(GradientDescentTrainer.__init__)
# The constructor's and `from_partial_objects`' parameters, and a deprecated one allennlp reads from `**kwargs`.
_KNOWN_KEYS = {
    name
    for method in (GradientDescentTrainer.__init__, GradientDescentTrainer.from_partial_objects)
    for name, parameter in inspect.signature(method).parameters.items()
    if parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    and name not in ("self", "cls")
} | {"run_sanity_checks", "precision"}
# `from_partial_objects` as allennlp's, with the plugin's `precision` option.
_FROM_PARTIAL_OBJECTS = with_precision_parameter(
    GradientDescentTrainer.from_partial_objects.__func__  # type: ignore[attr-defined]
)


def _quiet_default_console_logger(arguments: Dict[str, Any]) -> None:
    """The `console_logger` allennlp would add by default, given instead with `should_log_inputs`
    off (allennlp adds a default callback only where none of its class is given)."""
    given = list(arguments.get("callbacks") or [])
    if arguments.get("enable_default_callbacks", True) and not any(
        type(callback) is ConsoleLoggerCallback for callback in given
    ):
        serialization_dir = arguments.get("serialization_dir")
        arguments["callbacks"] = given + [
            ConsoleLoggerCallback(serialization_dir, should_log_inputs=False)
        ]


class _TotalBatches(TrainerCallback):
    """Keeps the trainer's count of batches trained in its checkpoints (the callbacks' state)."""

    def __init__(self, trainer: GradientDescentTrainer) -> None:
        super().__init__(trainer._serialization_dir)
        self.trainer = trainer
        self.restored: Optional[int] = None

    def state_dict(self) -> Dict[str, Any]:
        return {"total_batches_completed": self.trainer._total_batches_completed}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.restored = state_dict["total_batches_completed"]


@Trainer.register("elmoc_gradient_descent", constructor="from_partial_objects")
class FastRecoveryTrainer(GradientDescentTrainer):
    """
    allennlp's `GradientDescentTrainer` for long pretraining runs (docs/scale_and_fault_tolerance.md):
    `--recover` skips completed epochs unread (the batch count continues exactly); each epoch's data
    order is a function of (seed, epoch); a biLM's disjoint directions step on their own losses, each
    clipped on its own (uclanlp/ELMO-C, `other_stuff.clip`); a `set_global_batch` scheduler gets the
    global batch; settings that train nothing, an empty epoch and unknown keys are errors; the default
    `console_logger` does not log input tensors (docs/compat.md); on CPU torch's warnings about
    allennlp's disabled CUDA autocast are not shown.

    Its parameters are allennlp's `GradientDescentTrainer`'s (`from_partial_objects` and `__init__`
    take them on unchanged and are documented there), with these differences in effect: `grad_norm`
    clips each of a biLM's disjoint directions on its own; `callbacks` without a `console_logger`
    gets one that does not log input tensors; `learning_rate_scheduler` with `set_global_batch`
    (`elmoc_rnmt_plus`) is told the global batch, `batch_size x num_gradient_accumulation_steps x
    world_size`, which needs a fixed `data_loader.batch_sampler.batch_size`. One parameter is
    the plugin's own, below.

    Registered as a `Trainer` with name "elmoc_gradient_descent".

    # Parameters

    precision : `str`, optional (default = `"float32"`)
        `"float32"`, or `"bfloat16"`: mixed-precision training, each batch's forward pass under
        bfloat16 autocast where the device has native bfloat16, else float32 with one line saying
        so (`elmoc_allennlp.training.mixed_precision`, docs/pretraining.md). Not with `use_amp`.
    """

    def __init__(self, *args, precision: str = "float32", **kwargs) -> None:
        check_known_keys(kwargs, _KNOWN_KEYS, "elmoc_gradient_descent", prefix="trainer.")
        bound = _CONSTRUCTOR.bind(self, *args, **kwargs)
        _quiet_default_console_logger(bound.arguments)
        super().__init__(*bound.args[1:], **bound.kwargs)
        self._autocast_dtype = training_autocast_dtype(precision, self.cuda_device, self._use_amp)
        self._check_settings()
        self._total_batches = _TotalBatches(self)
        self._callbacks.append(self._total_batches)
        # Drawn after allennlp seeded `random`: the same on every rank and in a recovered run.
        self._epoch_seed = random.getrandbits(31)
        self._clip_groups = self._direction_groups()
        scheduler = self._learning_rate_scheduler
        if hasattr(scheduler, "set_global_batch"):
            sampler = getattr(self.data_loader, "batch_sampler", None)
            batch_size = (
                sampler.get_batch_size()
                if sampler is not None
                else getattr(self.data_loader, "batch_size", None)
            )
            if batch_size is None:
                raise ConfigurationError(
                    "trainer.learning_rate_scheduler (elmoc_rnmt_plus) needs a fixed "
                    "data_loader.batch_sampler.batch_size (not max_tokens)"
                )
            scheduler.set_global_batch(  # type: ignore[union-attr]
                batch_size * self._num_gradient_accumulation_steps * self._world_size
            )

    def train(self) -> Dict[str, Any]:
        with _quiet_disabled_autocast(self._use_amp):
            return super().train()

    def batch_outputs(self, batch: Dict[str, Any], for_training: bool) -> Dict[str, torch.Tensor]:
        with autocast(self.cuda_device, self._autocast_dtype):
            return super().batch_outputs(batch, for_training)

    def _direction_groups(self) -> Optional[List[List[torch.nn.Parameter]]]:
        """A biLM's two directions' parameters when disjoint (clipped one by one), else None."""
        model = self.model
        if getattr(model, "directions", None) != "both" or not hasattr(
            model, "direction_parameters"
        ):
            return None
        groups = [[p for _, p in model.direction_parameters(d)] for d in ("forward", "backward")]
        if {id(p) for p in groups[0]} & {id(p) for p in groups[1]}:
            logger.warning("The biLM's directions share parameters: grad_norm clips them together")
            return None
        return groups

    def rescale_gradients(self) -> Optional[float]:
        if self._clip_groups is None:
            return super().rescale_gradients()
        # Each direction steps on the gradient of its own LM's loss (the mean halved it), as the authors' two jobs.
        for group in self._clip_groups:
            for parameter in group:
                if parameter.grad is not None:
                    parameter.grad.mul_(len(self._clip_groups))
        if isinstance(self._grad_norm, bool):
            return super().rescale_gradients()
        if self._scaler is not None:
            self._scaler.unscale_(self.optimizer)
        norms = [
            torch.nn.utils.clip_grad_norm_(
                [p for p in group if p.grad is not None], self._grad_norm
            )
            for group in self._clip_groups
        ]
        return torch.stack(norms).norm().item()

    # allennlp divides the loader's length by `num_gradient_accumulation_steps` before `__init__` checks
    # it (0: a ZeroDivisionError), so it is checked first; the signature is allennlp's, for `from_params`.
    @classmethod
    def from_partial_objects(cls, *args, **kwargs) -> "FastRecoveryTrainer":
        steps = kwargs.get("num_gradient_accumulation_steps", 1)
        check_positive(steps, "trainer.num_gradient_accumulation_steps")
        return super().from_partial_objects(*args, **kwargs)  # type: ignore[return-value]

    from_partial_objects.__func__.__signature__ = _FROM_PARTIAL_OBJECTS  # type: ignore[attr-defined]

    def _check_settings(self) -> None:
        check_positive(self._num_epochs, "trainer.num_epochs")
        check_positive(
            self._num_gradient_accumulation_steps, "trainer.num_gradient_accumulation_steps"
        )
        for key, value in (("grad_norm", self._grad_norm), ("grad_clipping", self._grad_clipping)):
            if not isinstance(value, bool):
                check_positive(value, f"trainer.{key}", allow_none=True)
        for index, group in enumerate(self.optimizer.param_groups):
            rate = group.get("initial_lr", group.get("lr"))
            if isinstance(rate, (int, float)):
                group_name = f" (parameter group {index})" if index else ""
                check_positive(rate, f"trainer.optimizer.lr{group_name}")
        sampler = getattr(self.data_loader, "batch_sampler", None)
        for key in ("batch_size", "max_tokens"):
            value = getattr(sampler, key, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                check_positive(value, f"data_loader.batch_sampler.{key}")

    def _maybe_restore_checkpoint(self) -> None:
        super()._maybe_restore_checkpoint()
        # More epochs than `trainer.num_epochs` would train nothing and exit 0; fewer than 0 start over.
        epochs, batches = (
            self._start_after_epochs_completed,
            self._start_after_batches_in_epoch_completed,
        )
        if (
            not (0 <= epochs <= self._num_epochs)
            or batches < 0
            or (epochs == self._num_epochs and batches)
        ):
            raise ConfigurationError(
                f"--recover: the training state in {self._serialization_dir} has epochs_completed "
                f"= {epochs} and batches_in_epoch_completed = {batches}, outside this run of "
                f"trainer.num_epochs = {self._num_epochs}"
            )

    def _train_epoch(self, epoch: int) -> Dict[str, float]:
        restored = self._total_batches.restored
        if restored is not None and self._epochs_completed < self._start_after_epochs_completed:
            logger.info("Epoch %d was completed before the checkpoint: skipped unread", epoch)
            # The count at the checkpoint epoch's start: the stock skip loop counts that epoch's batches again.
            self._total_batches_completed = restored - self._start_after_batches_in_epoch_completed
            return {}
        set_epoch = getattr(getattr(self.data_loader, "reader", None), "set_epoch", None)
        random.seed(self._epoch_seed * 1_000_003 + epoch)
        if set_epoch is not None:
            set_epoch(epoch)
        try:
            metrics = super()._train_epoch(epoch)
        finally:
            if set_epoch is not None:
                set_epoch(None)
        if self._batches_in_epoch_completed == 0:
            raise ConfigurationError(
                f"Epoch {epoch} had no training batch: check dataset_reader.max_instances and "
                "data_loader.batch_sampler"
            )
        return metrics


@contextlib.contextmanager
def _quiet_disabled_autocast(use_amp: bool) -> Iterator[None]:
    """
    allennlp 2.10.1 enters `torch.cuda.amp.autocast(use_amp)` per batch: torch 1.12 warns "CUDA is not
    available" on CPU even when disabled (shown with `use_amp`, GPU only), torch 2 that it is deprecated.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated",
            category=FutureWarning,
        )
        if not use_amp:
            warnings.filterwarnings(
                "ignore",
                message="User provided device_type of 'cuda', but CUDA is not available",
                category=UserWarning,
            )
        yield
