"""
No two writers share an output, and `elmoc-embed` reads lines as written (issue #35, sections 3
and 4): a serialization folder and an `elmoc-embed` output have one writer at a time (an `flock`
the kernel releases when its process dies), a CR inside a line is whitespace, non-finite vectors
and a disk too small are refused before anything is written.
"""

import errno
import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import h5py
import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.disk_full import DiskFullError
from elmoc_allennlp.common.writer_lock import (
    FILE,
    FOLDER,
    FOLDER_LOCK_NAME,
    WriterLock,
    WriterLockError,
    lock_path_of,
)
from tests.bad_input.conftest import write_archive
from tests.conftest import FIXTURES_ROOT


def is_locked(output, what: str = FILE) -> bool:
    """Whether a process (another, or this one through another lock object) holds `output`'s lock."""
    return any(
        _is_locked(lock_path_of(os.path.abspath(output), inside))
        for inside in (False, what == FOLDER)
    )


def _is_locked(path: str) -> bool:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno in {errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES}
    finally:
        os.close(descriptor)
    return False


# Another process holding the lock: a bare `flock` on the lock file (no plugin import), as a run
# in another container or on another machine sharing the disk would. It holds it until it is
# killed or this process ends (its stdin closes), however long the test takes.
_HOLDER = (
    "import fcntl, os, sys\n"
    "descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(descriptor, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


class _Holder:
    def __init__(self, lock_file: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, lock_file],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "held"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)  # released by the kernel, however it ends
        self.process.wait()


def _snapshot(folder: Path):
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _train(folder: Path, **kwargs):
    from allennlp.commands.train import train_model_from_file

    return train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(folder),
        overrides=json.dumps({"trainer.num_epochs": 1}),
        **kwargs,
    )


def test_a_second_train_of_a_folder_is_refused_until_its_writer_dies(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # the first run's files
    holder = _Holder(lock_path_of(str(folder)))
    try:
        before = _snapshot(folder)
        for options in ({"force": True}, {"recover": True}):
            with pytest.raises(WriterLockError) as raised:
                _train(folder, **options)
            assert raised.value.output == str(folder)
            assert _snapshot(folder) == before
    finally:
        holder.kill()
    _train(folder, force=True)
    assert (folder / "model.tar.gz").is_file()
    assert not Path(lock_path_of(str(folder))).exists()  # released, and its file removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("fresh", [True, False])
def test_the_folder_is_locked_before_it_is_made_or_removed(tmp_path, monkeypatch, fresh):
    """No moment when the folder exists unlocked: `--force` removes, and a fresh run makes, the
    folder only while holding its lock (another run creating the folder cannot lose it)."""
    import shutil

    folder = tmp_path / "parent" / "run"
    if not fresh:
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")  # another run's folder, before it took its lock
    seen = []
    remove, make = shutil.rmtree, os.makedirs

    def rmtree(path, *args, **kwargs):
        if os.path.abspath(path) == str(folder):
            seen.append(("rmtree", is_locked(folder, FOLDER)))
        return remove(path, *args, **kwargs)

    def makedirs(path, *args, **kwargs):
        if os.path.abspath(path) == str(folder):
            seen.append(("makedirs", is_locked(folder, FOLDER)))
        return make(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    monkeypatch.setattr(os, "makedirs", makedirs)
    _train(folder, force=True)
    assert [kind for kind, _ in seen][: 1 if fresh else 2] == ["rmtree", "makedirs"][
        1 if fresh else 0 :
    ]
    assert all(locked for _, locked in seen)
    assert not is_locked(folder, FOLDER)


def test_a_folder_whose_parent_is_read_only_is_locked_inside_it(tmp_path, monkeypatch):
    from elmoc_allennlp.hardening import serialization_lock

    folder = tmp_path / "mount"
    folder.mkdir()

    class ReadOnlyParent(WriterLock):
        def acquire(self):
            if not self.path.startswith(str(folder) + os.sep):
                raise PermissionError(13, "Permission denied", self.path)
            return super().acquire()

    monkeypatch.setattr(serialization_lock, "WriterLock", ReadOnlyParent)
    seen = []
    from allennlp.commands.train import TrainModel

    original = TrainModel.run

    def run(self):
        seen.append((is_locked(folder, FOLDER), (folder / FOLDER_LOCK_NAME).exists()))
        with pytest.raises(WriterLockError):
            WriterLock(folder, FOLDER, inside=True).acquire()
        return original(self)

    monkeypatch.setattr(TrainModel, "run", run)
    _train(folder)
    assert seen == [(True, True)]
    assert not (folder / FOLDER_LOCK_NAME).exists() and (folder / "model.tar.gz").is_file()


def test_training_holds_its_folder_lock(tmp_path, monkeypatch):
    from allennlp.commands.train import TrainModel

    folder = tmp_path / "run"
    seen = []
    original = TrainModel.run

    def run(self):
        seen.append(is_locked(folder, FOLDER))
        return original(self)

    monkeypatch.setattr(TrainModel, "run", run)
    _train(folder)
    assert seen == [True]
    assert not is_locked(folder, FOLDER)


def test_the_lock_is_exclusive_within_a_process_too(tmp_path):
    first = WriterLock(tmp_path / "out.hdf5", FILE).acquire()
    with pytest.raises(WriterLockError):
        WriterLock(tmp_path / "out.hdf5", FILE).acquire()
    first.release()
    with WriterLock(tmp_path / "out.hdf5", FILE) as again:
        assert again.held and is_locked(tmp_path / "out.hdf5")
    assert not Path(lock_path_of(str(tmp_path / "out.hdf5"))).exists()


def test_a_file_system_without_flock_trains_and_embeds_unlocked_with_a_warning(
    elmoc_archive, tmp_path, monkeypatch, caplog
):
    import errno
    import fcntl

    from elmoc_allennlp.commands.elmoc_embed import embed_file
    from elmoc_allennlp.common import writer_lock

    def no_flock(descriptor, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    # Only the writer lock's flock fails (allennlp's own file locks keep theirs).
    monkeypatch.setattr(
        writer_lock,
        "fcntl",
        types.SimpleNamespace(flock=no_flock, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB),
    )
    (tmp_path / "in.txt").write_text("the bank\n")
    embed_file(str(elmoc_archive), str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "top")
    folder = tmp_path / "run"
    _train(folder)  # last: allennlp's logging set-up replaces the handler caplog reads
    assert (folder / "model.tar.gz").is_file()
    assert not is_locked(folder, FOLDER)  # an flock that fails this way is no lock held
    warnings = [
        r.getMessage() for r in caplog.records if "does not support flock" in r.getMessage()
    ]
    assert len(warnings) == 2 and "out.hdf5" in warnings[0] and str(folder) in warnings[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.hdf5", "run"]


@pytest.fixture
def sentences(tmp_path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("the bank\n")
    return path


def test_a_second_elmoc_embed_is_refused_and_keeps_the_first_writers_partial_file(
    elmoc_archive, tmp_path, sentences
):
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    output = tmp_path / "out.hdf5"
    # A live writer in another PID namespace: its pid means nothing here.
    partial = tmp_path / ".out.hdf5.partial-1-abcdefgh"
    partial.write_bytes(b"half of the first run's output")
    holder = _Holder(lock_path_of(str(output)))
    try:
        for force in (False, True):
            with pytest.raises(WriterLockError) as raised:
                embed_file(str(elmoc_archive), str(sentences), str(output), "top", force=force)
            assert raised.value.output == str(output)
            assert partial.read_bytes() == b"half of the first run's output"
            assert not output.exists()
    finally:
        holder.kill()
    embed_file(str(elmoc_archive), str(sentences), str(output), "top")
    assert not partial.exists()  # its writer is gone: the lock is free
    first = output.read_bytes()
    with pytest.raises(ConfigurationError):
        embed_file(str(elmoc_archive), str(sentences), str(output), "top")
    assert output.read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.hdf5"]


def test_a_cr_inside_a_line_is_whitespace_not_a_new_sentence(elmoc_archive, tmp_path):
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    text = tmp_path / "in.txt"
    text.write_bytes(b"a b\rc\nd e\r\nf\xe2\x80\xa8g\n")  # CR, CRLF, U+2028
    output = embed_file(str(elmoc_archive), str(text), str(tmp_path / "out.hdf5"), "top")
    with h5py.File(output, "r") as hdf5:
        assert sorted(key for key in hdf5 if key.isdigit()) == ["0", "1", "2"]
        assert [hdf5[str(i)].shape[0] for i in range(3)] == [3, 2, 2]
        assert set(json.loads(hdf5["sentence_to_index"][()])) == {"a b\rc", "d e", "f\u2028g"}


def test_nan_weights_are_refused_naming_the_line(elmoc_archive, tmp_path, sentences):
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    with tarfile.open(elmoc_archive) as tar:
        state = torch.load(io.BytesIO(tar.extractfile("weights.th").read()))
    name = next(key for key in state if "contextualizer" in key and state[key].dim() == 2)
    state[name].fill_(float("nan"))
    buffer = io.BytesIO()
    torch.save(state, buffer)
    info = tarfile.TarInfo("weights.th")
    info.size = len(buffer.getvalue())
    buffer.seek(0)
    path = write_archive(
        elmoc_archive, tmp_path / "nan.tar.gz", [(info, buffer)], drop=("weights.th",)
    )
    output = tmp_path / "out.hdf5"
    with pytest.raises(ConfigurationError) as raised:
        embed_file(str(path), str(sentences), str(output), "top")
    assert "line 1 " in str(raised.value) and str(path) in str(raised.value)
    assert not output.exists()


def test_a_disk_too_small_is_refused_before_writing(
    elmoc_archive, tmp_path, sentences, monkeypatch
):
    import shutil

    from elmoc_allennlp.commands import elmoc_embed

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(elmoc_embed.shutil, "disk_usage", lambda path: usage._replace(free=1000))
    output = tmp_path / "out.hdf5"
    with pytest.raises(DiskFullError) as raised:
        elmoc_embed.embed_file(str(elmoc_archive), str(sentences), str(output), "all")
    assert str(output) in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
