"""
Every epoch in a new order, drawn from (seed, epoch) (the authors' `data.py` reshuffles files and
sentences at every pass): a run recovered in the middle of an epoch trains the rest of that
epoch's batches exactly as the uninterrupted run does.
"""

import json
import os

import pytest

from allennlp.commands.train import train_model_from_file
from allennlp.training.callbacks import TrainerCallback

import elmoc_allennlp  # noqa: F401
from tests.conftest import FIXTURES_ROOT

CRASH_VARIABLE = "ELMOC_TEST_CRASH_AT_BATCH"


class SimulatedCrash(RuntimeError):
    pass


@TrainerCallback.register("elmoc_test_record_batches")
class RecordBatches(TrainerCallback):
    """Appends each trained batch's identity to batches.jsonl; crashes at the batch named."""

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        self.trained = 0

    def on_batch(
        self,
        trainer,
        batch_inputs,
        batch_outputs,
        batch_metrics,
        epoch,
        batch_number,
        is_training,
        **kwargs,
    ) -> None:
        if not is_training:
            return
        ids = batch_inputs[0]["tokens"]["fasttext"]["subword_ids"]
        record = {"epoch": epoch, "shape": list(ids.shape), "rows": ids.sum(dim=(1, 2)).tolist()}
        with open(os.path.join(self.serialization_dir, "batches.jsonl"), "a") as log:
            log.write(json.dumps(record) + "\n")
        self.trained += 1
        if os.environ.get(CRASH_VARIABLE) == str(self.trained):
            raise SimulatedCrash(f"simulated crash at batch {self.trained}")


def _batches(run):
    return [json.loads(line) for line in (run / "batches.jsonl").read_text().splitlines()]


def test_recover_mid_epoch_continues_the_same_shuffled_order(tmp_path, monkeypatch):
    config = str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")
    overrides = json.dumps(
        {
            "dataset_reader.shuffle": True,
            "trainer.num_epochs": 3,
            "trainer.checkpointer.save_every_num_batches": 2,
            "trainer.callbacks": [{"type": "elmoc_test_record_batches"}],
        }
    )
    straight_run = tmp_path / "straight"
    train_model_from_file(config, str(straight_run), overrides=overrides)
    straight = _batches(straight_run)
    epochs = [[b for b in straight if b["epoch"] == e] for e in range(3)]
    per_epoch = len(epochs[0])
    assert per_epoch >= 4 and all(len(e) == per_epoch for e in epochs)
    # A new order every epoch (same sentences: the same multiset of rows).
    assert epochs[0] != epochs[1] != epochs[2]
    rows = [sorted(r for b in e for r in b["rows"]) for e in epochs]
    assert rows[0] == pytest.approx(rows[1]) and rows[1] == pytest.approx(rows[2])

    run = tmp_path / "crashed"
    crash_at = per_epoch + 3  # inside epoch 1, after its checkpoint at batch 2
    monkeypatch.setenv(CRASH_VARIABLE, str(crash_at))
    with pytest.raises(SimulatedCrash):
        train_model_from_file(config, str(run), overrides=overrides)
    monkeypatch.delenv(CRASH_VARIABLE)
    before = len(_batches(run))
    train_model_from_file(config, str(run), overrides=overrides, recover=True)
    resumed = _batches(run)[before:]
    # Resumed inside epoch 1 (not at its start), on exactly the uninterrupted run's batches.
    assert 0 < len(resumed) < 2 * per_epoch
    assert resumed == straight[len(straight) - len(resumed) :]
