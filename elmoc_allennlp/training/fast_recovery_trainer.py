"""
allennlp's `gradient_descent` trainer, except that `--recover` does not read the data of the
epochs the checkpoint has already completed, a biLM's two directions are clipped as two LMs, and
every epoch's data order is a function of (seed, epoch).
"""
import logging
import random
from typing import Any, Dict, List, Optional

import torch

from allennlp.common.checks import ConfigurationError
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer, TrainerCheckpoint

logger = logging.getLogger(__name__)

TOTAL_BATCHES_KEY = "elmoc_total_batches_completed"


@Trainer.register("elmoc_gradient_descent", constructor="from_partial_objects")
class FastRecoveryTrainer(GradientDescentTrainer):
    """
    allennlp's `GradientDescentTrainer` (same parameters) for long pretraining runs.

    On recovery the stock trainer replays every completed epoch through the data loader, reading
    and indexing all of its batches without training on them, so that a random data order is
    drawn exactly as in an uninterrupted run. At the paper's scale (10 epochs of ~800M tokens)
    a crash late in the run costs hours of re-reading before training resumes. This trainer
    saves the total number of batches trained in the checkpoint and skips completed epochs
    without touching the data loader; the batch count that learning-rate schedules
    (`elmoc_rnmt_plus`) step with continues exactly. Within the epoch the checkpoint was written in (a
    `save_every_num_batches` checkpoint), the batches already trained are still skipped by
    reading them, as allennlp does.

    Since every epoch's order is drawn from (seed, epoch) (below), the skipped epochs need no
    replay of random generators: the remaining epochs are in the uninterrupted run's order.
    Checkpoints written by `gradient_descent` (without the count) are recovered the stock way.

    Two LMs in one job: with a biLM whose two directions train disjoint parameters
    (`direction_parameters`; the paper config), `grad_norm` clips each direction's gradient norm
    on its own, as the authors' two jobs did (`other_stuff.clip` 1.0 in each), so that a spike in
    one direction does not shrink the other's update. With the model's summed loss and Adam's
    per-parameter update, a joint step equals the two single-direction steps. The returned
    gradient norm is that of both.

    Per-epoch order: before each training epoch the reader (if it has `set_epoch`, as
    `elmoc_lm_corpus` has) is told the epoch, and Python's `random` (which the `bucket` sampler
    shuffles with) is seeded from (the trainer's seed, epoch), the same on every rank. The order
    of an epoch is therefore the same in a run recovered in its middle (with `num_workers` 0:
    worker processes interleave their batches in arrival order), and the batches the stock skip
    loop passes are the ones already trained. Validation is read with no epoch (unshuffled).

    The global batch: a learning-rate scheduler with `set_global_batch` (`elmoc_rnmt_plus`) is
    given `B` = the loader's batch size x `num_gradient_accumulation_steps` x the world size.

    It also refuses, at construction, settings that would train nothing or silently train
    wrongly (`num_epochs`, `num_gradient_accumulation_steps`, `grad_norm`, `grad_clipping`, the
    optimizer's `lr`, the batch sampler's `batch_size` / `max_tokens` below 1 or not positive),
    and an epoch that trained no batch at all, with a `ConfigurationError` naming the key.

    Registered as a `Trainer` with name "elmoc_gradient_descent".
    """

    _restored_total_batches: Optional[int] = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._check_settings()
        # Drawn after allennlp seeded `random`: the same on every rank and in a recovered run.
        self._epoch_seed = random.getrandbits(31)
        self._clip_groups = self._direction_groups()
        scheduler = self._learning_rate_scheduler
        if hasattr(scheduler, "set_global_batch"):
            sampler = getattr(self.data_loader, "batch_sampler", None)
            batch_size = (
                sampler.get_batch_size() if sampler is not None
                else getattr(self.data_loader, "batch_size", None)
            )
            if batch_size is None:
                raise ConfigurationError(
                    "trainer.learning_rate_scheduler (elmoc_rnmt_plus) needs a fixed "
                    "data_loader.batch_sampler.batch_size (not max_tokens) to know the global batch"
                )
            scheduler.set_global_batch(  # type: ignore[union-attr]
                batch_size * self._num_gradient_accumulation_steps * self._world_size
            )

    def _direction_groups(self) -> Optional[List[List[torch.nn.Parameter]]]:
        """A biLM's two directions' parameters when disjoint (clipped one by one), else None."""
        model = self.model
        if getattr(model, "directions", None) != "both" or not hasattr(
            model, "direction_parameters"
        ):
            return None
        groups = [[p for _, p in model.direction_parameters(d)] for d in ("forward", "backward")]
        if {id(p) for p in groups[0]} & {id(p) for p in groups[1]}:
            logger.warning(
                "The biLM's directions share trainable parameters: grad_norm clips them together"
            )
            return None
        return groups

    def rescale_gradients(self) -> Optional[float]:
        if self._clip_groups is None or isinstance(self._grad_norm, bool):
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

    def _check_settings(self) -> None:
        """Settings that would train nothing, or silently wrongly, are errors naming the key."""
        problems = []
        if self._num_epochs is None or self._num_epochs < 1:
            problems.append(f"trainer.num_epochs must be at least 1, got {self._num_epochs}")
        if self._num_gradient_accumulation_steps < 1:
            problems.append(
                "trainer.num_gradient_accumulation_steps must be at least 1, got "
                f"{self._num_gradient_accumulation_steps}"
            )
        for key, value in (("grad_norm", self._grad_norm), ("grad_clipping", self._grad_clipping)):
            if value is not None and not isinstance(value, bool) and not value > 0:
                problems.append(f"trainer.{key} must be positive (or null), got {value}")
        for index, group in enumerate(self.optimizer.param_groups):
            rate = group.get("initial_lr", group.get("lr"))
            if isinstance(rate, (int, float)) and not rate > 0:
                group_name = f" (parameter group {index})" if index else ""
                problems.append(f"trainer.optimizer.lr must be positive{group_name}, got {rate}")
        sampler = getattr(self.data_loader, "batch_sampler", None)
        for key in ("batch_size", "max_tokens"):
            value = getattr(sampler, key, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1:
                problems.append(f"data_loader.batch_sampler.{key} must be at least 1, got {value}")
        if problems:
            raise ConfigurationError("; ".join(problems))

    def get_checkpoint_state(self) -> Optional[TrainerCheckpoint]:
        state = super().get_checkpoint_state()
        if state is not None:
            state.trainer_state[TOTAL_BATCHES_KEY] = self._total_batches_completed
        return state

    def _maybe_restore_checkpoint(self) -> None:
        checkpointer = self._checkpointer
        if checkpointer is None:
            return super()._maybe_restore_checkpoint()
        loaded: Dict[str, Any] = {}
        load_checkpoint = checkpointer.load_checkpoint

        def load_and_keep():
            state = load_checkpoint()
            loaded["state"] = state
            return state

        checkpointer.load_checkpoint = load_and_keep  # type: ignore[method-assign]
        try:
            super()._maybe_restore_checkpoint()
        finally:
            del checkpointer.load_checkpoint  # the class's method again
        state = loaded.get("state")
        if state is None or TOTAL_BATCHES_KEY not in state.trainer_state:
            self._restored_total_batches = None
            return
        training_state = state.trainer_state
        # The count at the start of the checkpoint's epoch: the batches trained in that epoch
        # are counted again as the stock skip loop passes them.
        self._restored_total_batches = (
            training_state[TOTAL_BATCHES_KEY] - training_state["batches_in_epoch_completed"]
        )

    def _train_epoch(self, epoch: int) -> Dict[str, float]:
        if (
            self._restored_total_batches is not None
            and self._epochs_completed < self._start_after_epochs_completed
        ):
            logger.info(
                "Epoch %d was completed before the checkpoint: skipped without reading its data",
                epoch,
            )
            self._total_batches_completed = self._restored_total_batches
            return {}
        reader = getattr(self.data_loader, "reader", None)
        set_epoch = getattr(reader, "set_epoch", None)
        random.seed(self._epoch_seed * 1_000_003 + epoch)
        if set_epoch is not None:
            set_epoch(epoch)
        try:
            metrics = super()._train_epoch(epoch)
        finally:
            if set_epoch is not None:
                set_epoch(None)
        if self._batches_in_epoch_completed == 0:
            # Nothing trained: an empty corpus, or a data loader that yields no batch. Going on
            # would write an untrained model.tar.gz and exit 0.
            raise ConfigurationError(
                f"Epoch {epoch} had no training batch: train_data_path gave no instances "
                "(dataset_reader.max_instances?), or the data loader made no batch of them "
                "(data_loader.batch_sampler)"
            )
        return metrics
