import json
import logging
import os
import time
from typing import Any, Dict, List, Optional

from allennlp.common.checks import ConfigurationError
from allennlp.training.callbacks.callback import TrainerCallback

from elmoc_allennlp.common.atomic_files import atomic_torch_save, atomic_write

logger = logging.getLogger(__name__)

MARKS_FILE = "marks.json"


@TrainerCallback.register("elmoc_archive_at_marks")
class ArchiveAtMarksCallback(TrainerCallback):
    """
    Writes `SERIALIZATION_DIR/<directory>/model_<minutes>min.tar.gz` (by `allennlp train`'s `archive_model`)
    and a record in `<directory>/marks.json` each time training passes a mark of wall-clock time (training
    and validation; `--recover` continues the clock). Only the primary worker writes.

    Registered as a `TrainerCallback` with name "elmoc_archive_at_marks".

    # Parameters

    serialization_dir : `str`
        The run's folder (given by `allennlp train`, not in the config): `directory` is made in it.
    minutes : `List[float]`
        The marks, in minutes of training, positive and increasing; each is archived after the
        first batch that ends at or past it.
    directory : `str`, optional (default = `"archives"`)
        Folder under the serialization directory for the archives and `marks.json`.
    """

    def __init__(
        self, serialization_dir: str, minutes: List[float], directory: str = "archives"
    ) -> None:
        super().__init__(serialization_dir)
        if not minutes or any(m <= 0 for m in minutes) or list(minutes) != sorted(set(minutes)):
            raise ConfigurationError(
                f"elmoc_archive_at_marks.minutes must be positive and increasing, got {minutes!r}"
            )
        self._minutes = [float(m) for m in minutes]
        names: Dict[str, float] = {}
        for mark in self._minutes:
            name = archive_name(mark)
            if name in names:
                raise ConfigurationError(
                    f"elmoc_archive_at_marks.minutes has {names[name]!r} and {mark!r}, which both "
                    f"name the archive {name}: use marks that differ in their first 6 digits"
                )
            names[name] = mark
        self._directory = os.path.join(serialization_dir, directory)
        self._elapsed_before = 0.0
        self._started: Optional[float] = None
        self._done = _load_marks(self._directory)

    def elapsed_seconds(self) -> float:
        """Training wall-clock seconds so far (those before a `--recover` included)."""
        running = 0.0 if self._started is None else time.monotonic() - self._started
        return self._elapsed_before + running

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        self._started = time.monotonic()

    def on_batch(
        self,
        trainer,
        batch_inputs,
        batch_outputs,
        batch_metrics,
        epoch: int,
        batch_number: int,
        is_training: bool,
        is_primary: bool = True,
        **kwargs,
    ) -> None:
        if not (is_training and is_primary):
            return
        elapsed = self.elapsed_seconds()
        archived = {record["minutes"] for record in self._done}
        for minutes in self._minutes:
            if minutes not in archived and elapsed >= 60.0 * minutes:
                self._archive(trainer, minutes, elapsed, epoch, batch_number)

    def _archive(self, trainer, minutes: float, elapsed: float, epoch: int, batch: int) -> None:
        # The module attribute: the atomic wrapper of compat/carried_files.py.
        import allennlp.commands.train as train_command

        os.makedirs(self._directory, exist_ok=True)
        name = archive_name(minutes)
        weights = f".weights_at_{minutes:g}min.th"
        weights_path = os.path.join(self.serialization_dir, weights)
        atomic_torch_save(trainer.model.state_dict(), weights_path)
        try:
            train_command.archive_model(
                self.serialization_dir,
                weights=weights,
                archive_path=os.path.join(self._directory, name),
            )
        finally:
            os.remove(weights_path)
        self._done.append(
            {
                "minutes": minutes,
                "elapsed_seconds": round(elapsed, 3),
                "epoch": epoch,
                "batch": batch,
                "archive": name,
            }
        )
        with atomic_write(os.path.join(self._directory, MARKS_FILE), "w") as marks:
            json.dump(self._done, marks, indent=2)
        logger.info("Archived the model at %g min of training: %s", minutes, name)

    def state_dict(self) -> Dict[str, Any]:
        return {"elapsed_seconds": self.elapsed_seconds()}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self._elapsed_before = float(state_dict.get("elapsed_seconds", 0.0))
        if self._started is not None:
            self._started = time.monotonic()


def archive_name(minutes: float) -> str:
    """The file name of the archive at `minutes` (distinct marks must give distinct names)."""
    return f"model_{minutes:g}min.tar.gz"


_RECORD_KEYS = {"minutes": (int, float), "archive": str}


def _load_marks(folder: str) -> List[Dict[str, Any]]:
    """The records of `<folder>/marks.json`, or a `ConfigurationError` naming the file."""
    path = os.path.join(folder, MARKS_FILE)
    if not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as marks:
            records = json.load(marks)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ConfigurationError(
            f"{path} is not readable JSON ({type(error).__name__}: {str(error)[:100]}); move it "
            "away to archive every mark again"
        ) from None
    if not isinstance(records, list):
        raise ConfigurationError(f"{path} holds a {type(records).__name__}, not a list of marks")
    for index, record in enumerate(records):
        for key, kinds in _RECORD_KEYS.items():
            value = record.get(key) if isinstance(record, dict) else None
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise ConfigurationError(f"{path}: record {index} has no valid {key!r}")
        if os.path.basename(record["archive"]) != record["archive"]:
            raise ConfigurationError(f"{path}: record {index} names an archive outside {folder}")
    return records


def read_marks(serialization_dir: str, directory: str = "archives") -> List[Dict[str, Any]]:
    """The records of a run's `marks.json`, with absolute archive paths."""
    folder = os.path.join(serialization_dir, directory)
    return [dict(r, archive=os.path.join(folder, r["archive"])) for r in _load_marks(folder)]
