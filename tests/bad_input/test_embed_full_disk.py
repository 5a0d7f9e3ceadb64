"""
A disk that fills while `elmoc-embed` writes (issue #35, section 3): the free-space check passed,
then a write failed. Each run must end in one error naming the output, with exit status 1, no
output (or the earlier one, unchanged), no temporary file and no lock file left.

Before the fix, HDF5 was left broken by the failed write: hundreds of "Exception ignored"
tracebacks, then a segfault (exit 139). The real failures are made two ways: a file-size limit
(`RLIMIT_FSIZE`, which any Linux process may lower for its children: a write past it fails with
EFBIG, Python ignoring SIGXFSZ), and, where `unshare -rm` is allowed, a small tmpfs that another
process fills once the output's temporary file exists (ENOSPC). In this process, a failing
`os.pwrite` picks the write that fails (the last one is made while HDF5 closes the file).
"""

import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy
import pytest

from elmoc_allennlp.commands import elmoc_embed
from elmoc_allennlp.common.disk_full import DiskFullError
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
from tests.fresh_process import run_python

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]

# `allennlp` as a user runs it, importing this tree: allennlp 2.10.1's `__main__` puts its own
# site-packages first on `sys.path`, where a non-editable install of the plugin would win.
_CLI = (
    "import sys, allennlp.__main__ as cli; sys.path.insert(0, sys.argv.pop(1)); "
    "sys.argv[0] = 'allennlp'; cli.run()"
)
# 600 lines of 10 tokens: about 1.6 MB of hdf5 with `--all` (the tiny biLM: 3 layers of 12),
# written in a second or so; the free-space check asks for about 3.3 MB.
LINES = 600
_FILE_SIZE_LIMIT = 256 * 1024
_TMPFS = "5m"
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - [A-Z]+ - ")
# A drawing of the export's progress bar: tqdm redraws it at most every 0.1 s, so a busy machine
# draws it more often (up to once a batch).
_BAR_DRAWING = re.compile(r"^elmoc-embed: .*\| \d+/\d+ \[")


@pytest.fixture(scope="module")
def sentences(tmp_path_factory) -> Path:
    words = "the cat sat on a mat dog ran far away".split()
    path = tmp_path_factory.mktemp("full_disk_input") / "sentences.txt"
    lines = (" ".join(words[(line + k) % len(words)] for k in range(10)) for line in range(LINES))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _embed_command(archive: Path, sentences: Path, output: Path):
    return [
        sys.executable,
        "-c",
        _CLI,
        str(ROOT),
        "elmoc-embed",
        str(archive),
        str(sentences),
        str(output),
        "--all",
        "--batch-size",
        "16",
    ]


def _environment():
    return dict(os.environ, PYTHONPATH=str(ROOT), ALLENNLP_LOG_LEVEL="INFO")


def _assert_one_clear_error(returncode: int, stderr: str, output: Path, code: int) -> None:
    """Exit status 1, one traceback ending in a `DiskFullError` with `code` naming `output`."""
    assert returncode == 1, f"exit status {returncode}:\n{stderr[-3000:]}"
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"{DiskFullError.__module__}.DiskFullError: [Errno {code}]"), last
    assert str(output) in last
    assert stderr.count("Traceback") == 1 and "Exception ignored" not in stderr
    # What is neither a log line nor the progress bar: warnings at import, the traceback.
    other = [
        line
        for line in stderr.splitlines()
        if line.strip() and not _LOG_LINE.match(line) and not _BAR_DRAWING.match(line)
    ]
    assert len(other) <= 40, stderr


def test_a_file_size_limit_reached_mid_run(elmoc_archive, sentences, tmp_path):
    """
    `elmoc-embed` past a file-size limit ends in one clear error and leaves no file behind.

    `elmoc-embed` runs in a fresh process (`tests/fresh_process.py`): `RLIMIT_FSIZE` is set for
    that process, and the failure must hit a real HDF5 write mid-run.
    """
    output_folder = tmp_path / "out"
    output_folder.mkdir()
    output = output_folder / "vectors.hdf5"

    result = run_python(
        _embed_command(elmoc_archive, sentences, output)[1:],
        env=_environment(),
        limits=[(resource.RLIMIT_FSIZE, _FILE_SIZE_LIMIT)],
        timeout=300,
    )
    _assert_one_clear_error(result.returncode, result.stderr, output, errno.EFBIG)
    # No output, no partial `.vectors.hdf5.partial-*` file, no `.vectors.hdf5.lock`.
    assert os.listdir(output_folder) == []


# Run as root of a new user and mount namespace: mounts a small tmpfs on the output folder,
# starts a filler that waits for the temporary output file (the free-space check has passed)
# and then takes all the space left, runs the export, and reports what the tmpfs holds at the
# end (the tmpfs goes with the namespace).
_IN_NAMESPACE = r"""
import glob, json, os, subprocess, sys, threading
folder, size, log, command = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", folder], check=True)
filled = []

def fill():
    while not glob.glob(os.path.join(folder, ".*.partial-*")):
        if done.is_set():
            return
        done.wait(0.001)
    with open(os.path.join(folder, "filler"), "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(bytes(65536))
        except OSError as error:
            filled.append(error.errno)

done = threading.Event()
thread = threading.Thread(target=fill)
thread.start()
with open(log, "w") as stderr:
    returncode = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=stderr).returncode
done.set()
thread.join()
if os.path.exists(os.path.join(folder, "filler")):
    os.remove(os.path.join(folder, "filler"))
print(json.dumps({"returncode": returncode, "filled": filled, "left": sorted(os.listdir(folder))}))
"""


def _unshare_fails(folder: Path) -> str:
    """Why a tmpfs cannot be mounted in a new user and mount namespace here, or ''."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    try:
        result = subprocess.run(
            ["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unshare -rm failed: {error}"
    return "" if result.returncode == 0 else f"unshare -rm mount failed: {result.stderr.strip()}"


def test_a_disk_filled_by_another_process_mid_run(elmoc_archive, sentences, tmp_path):
    """
    `elmoc-embed` on a disk another process fills mid-run ends in one clear error, no file left.

    Slow (~10 s): `elmoc-embed` runs in a fresh process on a small tmpfs in a new user and mount
    namespace, because the ENOSPC must come from a real filesystem that fills during the export.
    """
    output_folder = tmp_path / "tmpfs"
    output_folder.mkdir()
    reason = _unshare_fails(output_folder)
    if reason:
        pytest.skip(f"needs a tmpfs in a user namespace: {reason}")
    output = output_folder / "vectors.hdf5"
    log = tmp_path / "stderr.txt"
    command = _embed_command(elmoc_archive, sentences, output)
    result = subprocess.run(
        [
            "unshare",
            "-rm",
            sys.executable,
            "-c",
            _IN_NAMESPACE,
            str(output_folder),
            _TMPFS,
            str(log),
            json.dumps(command),
        ],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["filled"] == [errno.ENOSPC]  # the other process filled the disk
    _assert_one_clear_error(report["returncode"], log.read_text(), output, errno.ENOSPC)
    assert report["left"] == []  # the filler's file was removed: no output, partial or lock


# ------------------------------------------------------------------ in this process


@pytest.fixture(scope="module")
def embedder(elmoc_archive):
    return ElmocEmbedder(str(elmoc_archive))


def _export(embedder, elmoc_archive, sentences, output: Path) -> None:
    elmoc_embed.embed_file(
        str(elmoc_archive),
        str(sentences),
        str(output),
        "all",
        batch_size=16,
        embedder=embedder,
        force=True,
    )


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("failing", ["40th", "last"])
def test_a_failed_write_keeps_the_earlier_output_and_hdf5_usable(
    embedder, elmoc_archive, sentences, tmp_path, monkeypatch, code, failing
):
    """
    One write of a run replacing an earlier export fails (the 40th, or the last one, which HDF5
    makes while closing the file): one error naming the output (a `DiskFullError` for a full
    disk, an `OSError` with its errno for another failure), the earlier export unchanged and
    nothing else left; then the same process writes a complete export (HDF5 was not broken).
    """
    output = tmp_path / "out" / "vectors.hdf5"
    output.parent.mkdir()
    real_pwrite, calls = os.pwrite, []

    def counting_pwrite(descriptor, data, offset):
        calls.append(offset)
        if len(calls) == fail_at:
            raise OSError(code, os.strerror(code))
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(os, "pwrite", counting_pwrite)
    fail_at = 0
    _export(embedder, elmoc_archive, sentences, output)
    earlier = output.read_bytes()
    fail_at, writes, calls[:] = 40 if failing == "40th" else len(calls), len(calls), []
    assert writes > 40
    with pytest.raises(OSError) as raised:
        _export(embedder, elmoc_archive, sentences, output)
    assert raised.value.errno == code
    assert isinstance(raised.value, DiskFullError) == (code == errno.ENOSPC)
    assert str(output) in str(raised.value)
    assert len(calls) == fail_at  # no write to the disk after the failed one
    assert os.listdir(output.parent) == ["vectors.hdf5"] and output.read_bytes() == earlier

    output.unlink()
    fail_at = 0
    _export(embedder, elmoc_archive, sentences, output)
    assert output.read_bytes() == earlier  # deterministic: the same bytes as the first export
    with h5py.File(output, "r") as hdf5:
        assert len(hdf5) == LINES + 1  # and sentence_to_index
        assert hdf5[str(LINES - 1)].shape == (embedder.num_layers, 10, embedder.output_dim)


def test_after_a_failed_write_hdf5_reads_what_it_wrote(tmp_path, monkeypatch):
    """
    After the failed write, HDF5 goes on (the rest of a dataset, the metadata written when it
    closes the file; with many datasets it also reads back metadata it evicted from its cache):
    it reads back exactly what it wrote, and the file on disk is not written again.
    """
    path = tmp_path / "vectors.hdf5.partial"
    path.write_bytes(b"")
    arrays = [numpy.random.default_rng(k).random((3, 1 + k % 7, 12), dtype="f4") for k in range(60)]
    real_pwrite, calls = os.pwrite, []

    def failing_pwrite(descriptor, data, offset):
        calls.append(offset)
        if len(calls) == 10:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    with elmoc_embed.HDF5Output(str(path)) as raw, h5py.File(raw, "w") as hdf5:
        for index, array in enumerate(arrays):
            hdf5.create_dataset(str(index), data=array)
            if index == 30:
                hdf5.flush()
        assert raw.error is not None and raw.error.errno == errno.ENOSPC
        on_disk = path.read_bytes()
        for index, array in enumerate(arrays):
            numpy.testing.assert_array_equal(hdf5[str(index)][()], array)
    assert len(calls) == 10 and path.read_bytes() == on_disk
    with pytest.raises(DiskFullError) as raised:
        raw.check(tmp_path / "vectors.hdf5")
    assert raised.value.errno == errno.ENOSPC
    assert str(tmp_path / "vectors.hdf5") in str(raised.value)


def test_after_a_failed_write_the_output_still_behaves_as_a_file(tmp_path, monkeypatch):
    """Writes, truncation and reads after the failure, as HDF5 sees them; the disk untouched."""
    path = tmp_path / "vectors.hdf5.partial"
    path.write_bytes(b"")
    with elmoc_embed.HDF5Output(str(path)) as raw:
        raw.seek(0)
        raw.write(b"0123456789")

        def no_space(descriptor, data, offset):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "pwrite", no_space)
        raw.seek(8)
        assert raw.write(b"ab") == 2 and raw.error.errno == errno.ENOSPC
        raw.truncate(4)  # what lay past 4 is gone, on disk and in memory
        raw.truncate(12)
        raw.seek(10)
        raw.write(b"cd")
        assert raw.seek(0, os.SEEK_END) == 12
        buffer = bytearray(b"x" * 14)
        raw.seek(0)
        raw.readinto(buffer)
        assert bytes(buffer) == b"0123" + bytes(6) + b"cd" + bytes(2)
    assert path.read_bytes() == b"0123456789"


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_an_hdf5_write_interrupts_cleanly(
    embedder, elmoc_archive, sentences, tmp_path, monkeypatch, request, number
):
    """
    Ctrl-C or SIGTERM arriving while HDF5 writes (h5py calls Python back from inside HDF5,
    where an exception would break it as a failed write does): the export stops with
    `KeyboardInterrupt` or `SystemExit(143)`, nothing is left, and HDF5 still works.
    """
    output = tmp_path / "out" / "vectors.hdf5"
    output.parent.mkdir()
    real_pwrite, calls = os.pwrite, []
    # The signal is raised in this thread (the main one, which runs signal handlers), from inside
    # an HDF5 write, and its Python handler has run when `raise_signal` returns, however busy the
    # machine. `os.kill` of this process left the thread to the kernel and the handler to
    # Python's next check: in a full run on a loaded machine, both exports finished uninterrupted.
    assert number not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    # A run started in the background of a non-interactive shell (or under nohup) inherits SIGINT
    # ignored, and the export rightly leaves it so: the test starts from an interactive shell's
    # handlers, and checks that the export puts them back.
    for handled, handler in [
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGTERM, signal.SIG_DFL),
    ]:
        previous = signal.signal(handled, handler)
        request.addfinalizer(
            lambda handled=handled, previous=previous: signal.signal(handled, previous)
        )

    def signalling_pwrite(descriptor, data, offset):
        calls.append(offset)
        if len(calls) == 40:
            signal.raise_signal(number)
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(os, "pwrite", signalling_pwrite)
    with pytest.raises(KeyboardInterrupt if number == signal.SIGINT else SystemExit) as raised:
        _export(embedder, elmoc_archive, sentences, output)
    if number == signal.SIGTERM:
        assert raised.value.code == 128 + signal.SIGTERM
    assert os.listdir(output.parent) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    _export(embedder, elmoc_archive, sentences, output)
    with h5py.File(output, "r") as hdf5:
        assert len(hdf5) == LINES + 1


def test_an_hdf5_error_after_a_failed_write_reports_the_write(
    embedder, elmoc_archive, sentences, tmp_path, monkeypatch
):
    """HDF5 raising on what a failed write left it: the failed write is the error shown."""
    output = tmp_path / "out" / "vectors.hdf5"
    output.parent.mkdir()
    real_pwrite, real_create, calls, failed = os.pwrite, h5py.Group.create_dataset, [], []

    def failing_pwrite(descriptor, data, offset):
        calls.append(offset)
        if len(calls) >= 40 and creating and not failed:  # a write of `create_dataset`
            failed.append(offset)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(descriptor, data, offset)

    def create_dataset(self, *args, **kwargs):
        creating.append(True)
        try:
            dataset = real_create(self, *args, **kwargs)
        finally:
            creating.pop()
        if failed:
            raise RuntimeError("Unable to create dataset (as HDF5 would say)")
        return dataset

    creating = []

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    monkeypatch.setattr(h5py.Group, "create_dataset", create_dataset)
    with pytest.raises(DiskFullError) as raised:
        _export(embedder, elmoc_archive, sentences, output)
    assert raised.value.errno == errno.ENOSPC and str(output) in str(raised.value)
    assert failed and os.listdir(output.parent) == []
