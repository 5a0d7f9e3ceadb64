"""Crash safety: checkpoints are never half-written, even under SIGKILL."""

import io
import os
import signal
from pathlib import Path

import pytest
import torch

from allennlp.training.checkpointer import Checkpointer
from allennlp.training.trainer import TrainerCheckpoint

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.training.atomic_checkpointer import AtomicCheckpointer
from elmoc_allennlp.common.atomic_files import atomic_write
from tests.crash_safety import killed_in_forked_child as _killed_in_forked_child
from tests.crash_safety import partial_files as _partials


class _FakeTrainer:
    def __init__(self, epochs: int, batches: int, value: float, size: int = 1000) -> None:
        self.state = TrainerCheckpoint(
            {"weight": torch.full((size,), value)},
            {"epochs_completed": epochs, "batches_in_epoch_completed": batches, "value": value},
        )
        self.state_calls = 0

    def get_checkpoint_state(self):
        self.state_calls += 1
        return self.state


def _dying_torch_save(victim: str):
    """A torch.save that writes half of the `victim` ("model" or "training") state and dies."""
    real_save = torch.save

    def save(obj, target, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer)
        data = buffer.getvalue()
        dies = ("weight" in obj) if victim == "model" else ("value" in obj)
        if isinstance(target, (str, os.PathLike)):
            target = open(target, "wb")
        target.write(data[: len(data) // 2] if dies else data)
        target.flush()
        if dies:
            os.kill(os.getpid(), signal.SIGKILL)

    return save


def _run_killed_child(directory: Path, checkpointer_class, victim: str) -> None:
    """Saves one good checkpoint, then is killed half-way through writing the next one."""

    # Tensors are made before forking: the child only serialises (no thread pools after fork).
    first, second = _FakeTrainer(0, 5, 1.0, size=200000), _FakeTrainer(0, 10, 2.0, size=200000)
    dying_save = _dying_torch_save(victim)

    def action():
        checkpointer = checkpointer_class(directory, keep_most_recent_by_count=None)
        checkpointer.save_checkpoint(first)
        torch.save = dying_save
        checkpointer.save_checkpoint(second)

    _killed_in_forked_child(action)


@pytest.mark.parametrize("victim", ["model", "training"])
def test_sigkill_mid_checkpoint_leaves_the_previous_checkpoint_usable(tmp_path, victim):
    _run_killed_child(tmp_path, AtomicCheckpointer, victim)
    # Nothing half-written under a real name; the interrupted checkpoint is invisible.
    assert not (tmp_path / "model_state_e0_b10.th").exists()
    if victim == "model":
        assert (tmp_path / "training_state_e0_b10.th").exists()  # written first, complete
    assert _partials(tmp_path), "the killed writer left its temporary file"

    recovered = AtomicCheckpointer(tmp_path)
    assert _partials(tmp_path) == []  # cleaned up on start
    state = recovered.load_checkpoint()
    assert state.trainer_state["batches_in_epoch_completed"] == 5
    assert torch.equal(state.model_state["weight"], torch.full((200000,), 1.0))


def test_the_stock_checkpointer_is_left_unrecoverable_by_the_same_kill(tmp_path):
    # What the atomic checkpointer fixes: allennlp's writes in place.
    _run_killed_child(tmp_path, Checkpointer, "model")
    assert (tmp_path / "model_state_e0_b10.th").exists()
    with pytest.raises(Exception):
        Checkpointer(tmp_path).load_checkpoint()
    # The atomic checkpointer recovers from the stock checkpointer's debris: the newest
    # checkpoint has no training state, so it does not count.
    state = AtomicCheckpointer(tmp_path).load_checkpoint()
    assert state.trainer_state["batches_in_epoch_completed"] == 5


def test_a_corrupt_newest_checkpoint_is_set_aside(tmp_path, caplog):
    checkpointer = AtomicCheckpointer(tmp_path, keep_most_recent_by_count=None)
    checkpointer.save_checkpoint(_FakeTrainer(1, 0, 1.0))
    checkpointer.save_checkpoint(_FakeTrainer(1, 7, 2.0))
    newest = tmp_path / "model_state_e1_b7.th"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated by some earlier, non-atomic writer
    state = AtomicCheckpointer(tmp_path).load_checkpoint()
    assert state.trainer_state["value"] == 1.0
    assert (tmp_path / "model_state_e1_b7.th.corrupt").exists()
    assert not newest.exists()
    assert "cannot be loaded" in caplog.text


def test_keeps_the_most_recent_and_overwrites_same_point(tmp_path):
    checkpointer = AtomicCheckpointer(tmp_path, keep_most_recent_by_count=2)
    for batches in (2, 4, 6):
        checkpointer.save_checkpoint(_FakeTrainer(0, batches, float(batches)))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model_state_e0_b4.th",
        "model_state_e0_b6.th",
        "training_state_e0_b4.th",
        "training_state_e0_b6.th",
    ]
    checkpointer.save_checkpoint(_FakeTrainer(0, 6, 60.0))  # stock: silently keeps the stale one
    assert checkpointer.load_checkpoint().trainer_state["value"] == 60.0


def test_the_state_is_taken_once_per_save(tmp_path):
    trainer = _FakeTrainer(0, 2, 1.0)
    AtomicCheckpointer(tmp_path).save_checkpoint(trainer)
    assert trainer.state_calls == 1  # a sharded model's state_dict gathers across workers


def test_best_weights_are_restored_if_killed_while_replaced(tmp_path):
    checkpointer = AtomicCheckpointer(tmp_path)
    trainer = _FakeTrainer(2, 0, 3.0)
    trainer.state.trainer_state["metric_tracker"] = {"best_epoch": 1}
    checkpointer.save_checkpoint(trainer)
    assert not (tmp_path / "best.th").exists()  # the trainer deleted it, then was killed
    checkpointer.load_checkpoint()
    assert torch.equal(torch.load(tmp_path / "best.th")["weight"], torch.full((1000,), 3.0))


def test_atomic_write_keeps_the_old_file_on_error(tmp_path):
    target = tmp_path / "file.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_write(target, "w") as handle:
            handle.write("new, partial")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert _partials(tmp_path) == []
