"""
allennlp's `gradient_descent` trainer, except that `--recover` does not read the data of the
epochs the checkpoint has already completed.
"""
import logging
from typing import Any, Dict, Optional

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

    The one difference from the stock trainer: a loader that draws its order from a random
    generator (the `bucket` batch sampler of the pretraining configs shuffles its batches) gives
    the remaining epochs another random order than an uninterrupted run would, since the
    generator did not replay the skipped epochs. The recovered run is not bit-identical to an
    uninterrupted one, but trains on the same data with the same schedule. Checkpoints written
    by `gradient_descent` (without the count) are recovered the stock way.

    Registered as a `Trainer` with name "elmoc_gradient_descent".
    """

    _restored_total_batches: Optional[int] = None

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
        return super()._train_epoch(epoch)
