"""Crash safety: checkpoints and archives are never half-written, even under SIGKILL."""
import io
import json
import os
import signal
import tarfile
import time
from pathlib import Path

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.models.archival import load_archive
from allennlp.training.checkpointer import Checkpointer
from allennlp.training.trainer import TrainerCheckpoint

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.training.atomic_checkpointer import AtomicCheckpointer
from elmoc_allennlp.common.atomic_files import PARTIAL_MARKER, atomic_write
from tests.conftest import FIXTURES_ROOT


class _FakeTrainer:
    def __init__(self, epochs: int, batches: int, value: float, size: int = 1000) -> None:
        self.state = TrainerCheckpoint(
            {"weight": torch.full((size,), value)},
            {"epochs_completed": epochs, "batches_in_epoch_completed": batches, "value": value},
        )

    def get_checkpoint_state(self):
        return self.state


def _partials(directory: Path):
    return sorted(p.name for p in directory.iterdir() if PARTIAL_MARKER in p.name)


def _killed_in_forked_child(action) -> None:
    """
    Runs `action` in a forked copy of this process, which is expected to SIGKILL itself (as a
    `kill -9` or a pre-empted machine would) before it returns.
    """
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            action()
        finally:
            os._exit(3)
    deadline = time.monotonic() + 60
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            break
        if time.monotonic() > deadline:  # never hang the suite
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.02)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


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


def test_training_run_archive_is_atomic_and_loads(tmp_path):
    # The plugin wraps allennlp's archive_model, as called by `allennlp train`.
    import allennlp.commands.train as train_command
    import allennlp.models

    assert hasattr(train_command.archive_model, "_elmoc_atomic_original")
    assert allennlp.models.archive_model is train_command.archive_model
    params = Params.from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"), json.dumps({"trainer.num_epochs": 1})
    )
    assert params["trainer"]["checkpointer"]["type"] == "elmoc_atomic"
    train_model(params, str(tmp_path / "run"))
    run = tmp_path / "run"
    assert _partials(run) == []
    with tarfile.open(run / "model.tar.gz") as tar:
        assert {"config.json", "weights.th", "vocabulary"} <= {m.name for m in tar.getmembers()}
    assert load_archive(run / "model.tar.gz").model is not None
    umask = os.umask(0o022)
    os.umask(umask)
    assert (run / "model.tar.gz").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    assert json.loads((run / "config.json").read_text())["model"]["type"] == "elmoc_bilm"


def test_sigkill_mid_archive_keeps_the_previous_archive(tmp_path):
    params = Params.from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"), json.dumps({"trainer.num_epochs": 1})
    )
    run = tmp_path / "run"
    train_model(params, str(run))
    before = (run / "model.tar.gz").read_bytes()
    import allennlp.commands.train as train_command

    def action():
        real_add = tarfile.TarFile.add

        def dying_add(self, name, arcname=None, *args, **kwargs):
            real_add(self, name, arcname, *args, **kwargs)
            if arcname == "weights.th":
                self.fileobj.flush()
                os.kill(os.getpid(), signal.SIGKILL)

        tarfile.TarFile.add = dying_add
        train_command.archive_model(str(run))

    _killed_in_forked_child(action)
    assert (run / "model.tar.gz").read_bytes() == before
    assert len(_partials(run)) == 1
    assert load_archive(run / "model.tar.gz").model is not None
