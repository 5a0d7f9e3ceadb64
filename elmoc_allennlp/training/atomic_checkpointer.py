import logging
import os
from types import SimpleNamespace
from typing import Any, Optional, Set, Tuple, Union

from allennlp.common.checks import ConfigurationError
from allennlp.training.checkpointer import Checkpointer
from allennlp.training.trainer import Trainer, TrainerCheckpoint

from elmoc_allennlp.common.atomic_files import atomic_torch_save, remove_stale_partial_files
from elmoc_allennlp.common.checks import check_positive
from elmoc_allennlp.common.torch_versions import load_tensors

logger = logging.getLogger(__name__)


@Checkpointer.register("elmoc_atomic")
class AtomicCheckpointer(Checkpointer):
    """
    allennlp's `Checkpointer`, crash-safe so that `allennlp train --recover` works after a kill at any
    instant (docs/scale_and_fault_tolerance.md, "Crash safety"), loading tensors only.

    Registered as a `Checkpointer` with name "elmoc_atomic".

    # Parameters

    serialization_dir : `Union[str, os.PathLike]`
        The run's folder, where the checkpoints are written (given by `allennlp train`, not in the
        config). Partial files a kill left there are removed when the checkpointer starts.
    save_completed_epochs : `bool`, optional (default = `True`)
        Save a checkpoint at the end of each completed epoch (allennlp's default).
    save_every_num_seconds : `float`, optional (default = `None`)
        If set (positive), never go longer than this many seconds of training without a
        checkpoint. Not for distributed runs, whose workers would disagree on when to save: use
        `save_every_num_batches` there.
    save_every_num_batches : `int`, optional (default = `None`)
        If set (positive), never go longer than this many batches without a checkpoint: set it for
        long epochs, so that `--recover` loses at most this many batches.
    keep_most_recent_by_count : `int`, optional (default = `2`)
        How many checkpoints to keep on disk (allennlp's default); older ones are removed, model
        state first, so that a kill mid-removal never leaves a half checkpoint that counts. With
        `keep_most_recent_by_age` too, a checkpoint either keeps is kept; both `None` keeps all.
    keep_most_recent_by_age : `int`, optional (default = `None`)
        Keep checkpoints younger than this many seconds (with `keep_most_recent_by_count`: a
        checkpoint either keeps is kept).
    """

    def __init__(
        self,
        serialization_dir: Union[str, os.PathLike],
        save_completed_epochs: bool = True,
        save_every_num_seconds: Optional[float] = None,
        save_every_num_batches: Optional[int] = None,
        keep_most_recent_by_count: Optional[int] = 2,
        keep_most_recent_by_age: Optional[int] = None,
    ) -> None:
        for key, value in (
            ("save_every_num_seconds", save_every_num_seconds),
            ("save_every_num_batches", save_every_num_batches),
            ("keep_most_recent_by_count", keep_most_recent_by_count),
            ("keep_most_recent_by_age", keep_most_recent_by_age),
        ):
            check_positive(value, f"trainer.checkpointer.{key}", allow_none=True)
        super().__init__(
            serialization_dir,
            save_completed_epochs=save_completed_epochs,
            save_every_num_seconds=save_every_num_seconds,
            save_every_num_batches=save_every_num_batches,
            keep_most_recent_by_count=keep_most_recent_by_count,
            keep_most_recent_by_age=keep_most_recent_by_age,
        )
        if self._is_primary and os.path.isdir(self._serialization_dir):
            remove_stale_partial_files(self._serialization_dir)

    def _find_all_checkpoints(self) -> Set[Tuple[int, int]]:
        # A checkpoint counts only when both of its files are there.
        return {
            checkpoint
            for checkpoint in super()._find_all_checkpoints()
            if os.path.isfile(self._training_state_path(*checkpoint))
        }

    def _remove_checkpoint(self, epochs_completed: int, batches_in_epoch_completed: int) -> None:
        # Model state first: once it is gone the checkpoint no longer counts.
        for path in (
            self._model_state_path(epochs_completed, batches_in_epoch_completed),
            self._training_state_path(epochs_completed, batches_in_epoch_completed),
        ):
            if os.path.exists(path):
                os.remove(path)

    def save_checkpoint(self, trainer: Trainer) -> None:
        if self._serialization_dir is None:
            return
        checkpoint = (
            trainer.get_checkpoint_state()
        )  # `None` on a non-primary worker: the primary saves
        if checkpoint is not None:
            point_in_time = (
                checkpoint.trainer_state["epochs_completed"],
                checkpoint.trainer_state["batches_in_epoch_completed"],
            )
            atomic_torch_save(checkpoint.trainer_state, self._training_state_path(*point_in_time))
            atomic_torch_save(checkpoint.model_state, self._model_state_path(*point_in_time))
        # Given the state already taken, allennlp's method finds both files: it only keeps books and prunes.
        super().save_checkpoint(SimpleNamespace(get_checkpoint_state=lambda: checkpoint))  # type: ignore[arg-type]

    def load_checkpoint(self) -> Optional[TrainerCheckpoint]:
        """The newest checkpoint that loads, or `None` when there is none."""
        damaged = []
        for checkpoint in sorted(self._find_all_checkpoints(), reverse=True):
            paths = (self._model_state_path(*checkpoint), self._training_state_path(*checkpoint))
            try:
                model_state, training_state = (load_tensors(path) for path in paths)
            except Exception as error:  # truncated, corrupt, or not tensors only
                message = "Checkpoint %s / %s cannot be loaded (%s: %s); trying an older one."
                logger.warning(message, *paths, type(error).__name__, error)
                damaged.append(paths)
                continue
            _check_training_state(training_state, checkpoint, paths[1])
            if self._is_primary:
                for path in (path for pair in damaged for path in pair if os.path.exists(path)):
                    os.replace(path, path + ".corrupt")
                self._restore_best_weights(training_state)
            return TrainerCheckpoint(model_state, training_state)
        if damaged:
            raise ConfigurationError(
                f"--recover: no checkpoint of {self._serialization_dir} loads (damaged, not "
                f"renamed: {', '.join(path for pair in damaged for path in pair)})"
            )
        return None

    def _restore_best_weights(self, training_state) -> None:
        best_path = os.path.join(self._serialization_dir, "best.th")
        if os.path.exists(best_path):
            return
        best_epoch = training_state.get("metric_tracker", {}).get("best_epoch")
        if best_epoch is None:
            return
        # The trainer links best.th to the checkpoint saved at the end of the best epoch.
        source = self._model_state_path(best_epoch + 1, 0)
        if os.path.isfile(source):
            logger.warning("best.th is missing (killed while it was replaced); restoring it.")
            try:
                os.link(source, best_path)
            except OSError:
                atomic_torch_save(load_tensors(source), best_path)


def _check_training_state(training_state: Any, point_in_time: Tuple[int, int], path: str) -> None:
    """The training state's point in time must be the one its file is named by (not 10^9 or -5 epochs)."""
    if not isinstance(training_state, dict):
        raise ConfigurationError(f"--recover: {path} is not a training state (a dict)")
    for key, expected in zip(("epochs_completed", "batches_in_epoch_completed"), point_in_time):
        if key not in training_state:
            continue
        value = training_state[key]
        if type(value) is not int or value != expected:
            raise ConfigurationError(
                f"--recover: {path} has {key} = {str(value)[:40]}, but its name says {expected}; "
                "the checkpoint was altered"
            )
