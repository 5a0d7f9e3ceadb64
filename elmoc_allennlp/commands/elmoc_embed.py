"""
The `elmoc-embed` subcommand: ELMo-C vectors of every line of a text file, written to hdf5 (as
the removed `allennlp elmo` command did for ELMo).

The input has one whitespace-tokenized sentence per line. The output has one dataset per line,
named by its 0-based index, of shape `(num_layers, num_tokens, dim)` with `--all`, `(num_tokens,
dim)` with `--top` or `--average`, and, unless `--forget-sentences`, a dataset
`sentence_to_index` (JSON). The file is written atomically: an interrupted run leaves none,
and a disk that fills during the run ends it with one `DiskFullError` naming the output.
One run writes an output at a time (`common.writer_lock`: `.NAME.lock` next to it); lines end at
`\n` only, so dataset `i` is line `i + 1` of the input.

allennlp finds plugin subcommands before parsing the command line: list `elmoc_allennlp` in a
`.allennlp_plugins` file (`--include-package` alone is not enough).
"""
import argparse
import errno
import io
import json
import logging
import os
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy

from allennlp.commands.subcommand import Subcommand
from allennlp.common import logging as common_logging
from allennlp.common.checks import ConfigurationError
from allennlp.common.tqdm import Tqdm
from allennlp.common.util import lazy_groups_of

from elmoc_allennlp.common.atomic_files import atomic_path, remove_stale_partial_files, same_file
from elmoc_allennlp.common.checks import check_cuda_device, check_positive
from elmoc_allennlp.common.disk_full import DiskFullError, disk_full_error, find_disk_full
from elmoc_allennlp.common.threads import add_threads_argument, plugin_command, set_threads
from elmoc_allennlp.common.writer_lock import FILE, WriterLock

logger = logging.getLogger(__name__)

SENTENCE_TO_INDEX = "sentence_to_index"


@Subcommand.register("elmoc-embed")
class ElmocEmbed(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Write the ELMo-C representations of every line of a file (one whitespace-tokenized "
            "sentence per line) to an hdf5 file: one dataset per line, named by its 0-based index."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Export ELMo-C vectors to hdf5."
        )
        subparser.add_argument("archive_file", type=str, help="a biLM model.tar.gz")
        subparser.add_argument("input_file", type=str, help="one tokenized sentence per line")
        subparser.add_argument("output_file", type=str, help="the hdf5 file to write")
        layers = subparser.add_mutually_exclusive_group(required=True)
        layers.add_argument(
            "--all", action="store_true", help="every layer: (num_layers, num_tokens, dim)"
        )
        layers.add_argument("--top", action="store_true", help="the top layer: (num_tokens, dim)")
        layers.add_argument(
            "--average", action="store_true", help="the mean of the layers: (num_tokens, dim)"
        )
        subparser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
        subparser.add_argument(
            "--cuda-device", type=int, default=-1, help="the GPU to use; -1 for the CPU"
        )
        subparser.add_argument(
            "--vectors-path",
            type=str,
            default=None,
            help="the biLM's fastText .bin, if it is not where the archive says",
        )
        subparser.add_argument(
            "--allow-different-vectors",
            action="store_true",
            help="accept a fastText .bin other than the one the biLM was trained with",
        )
        subparser.add_argument(
            "--lowercase-tokens",
            action="store_true",
            help="lowercase tokens for a biLM whose input is not fastText",
        )
        subparser.add_argument(
            "--force", action="store_true", help="replace output_file if it exists"
        )
        subparser.add_argument(
            "--forget-sentences",
            action="store_true",
            help=f"do not write the {SENTENCE_TO_INDEX} dataset",
        )
        subparser.add_argument(
            "--file-friendly-logging",
            action="store_true",
            help="outputs tqdm status on separate lines and slows tqdm refresh rate",
        )
        add_threads_argument(subparser)
        subparser.set_defaults(func=elmoc_embed_from_args)
        return subparser


@plugin_command
def elmoc_embed_from_args(args: argparse.Namespace) -> None:
    common_logging.FILE_FRIENDLY_LOGGING = args.file_friendly_logging
    set_threads(args.threads)
    output = "all" if args.all else "top" if args.top else "average"
    embed_file(
        args.archive_file,
        args.input_file,
        args.output_file,
        output=output,
        batch_size=args.batch_size,
        cuda_device=args.cuda_device,
        vectors_path=args.vectors_path,
        forget_sentences=args.forget_sentences,
        force=args.force,
        allow_different_vectors=args.allow_different_vectors,
        lowercase_tokens=args.lowercase_tokens,
    )


def read_sentences(input_file: str) -> List[str]:
    """
    The lines of `input_file` (UTF-8), without their line ends. Lines end at `\n` only (and
    `\r\n`): a CR or another Unicode line break inside a line is whitespace between tokens,
    never a new sentence, so that dataset `i` is always line `i + 1`.
    """
    try:
        with open(input_file, encoding="utf-8", newline="\n") as lines:
            return [line.rstrip("\n").rstrip("\r") for line in lines]
    except FileNotFoundError:
        raise ConfigurationError(f"input file {input_file} does not exist") from None
    except IsADirectoryError:
        raise ConfigurationError(f"input file {input_file} is a directory") from None
    except UnicodeDecodeError as error:
        raise ConfigurationError(f"input file {input_file} is not UTF-8 text ({error})") from None


def _check_output(
    output_file: str, input_file: str, force: bool, kept: Sequence[Tuple[str, Optional[str]]] = ()
) -> Path:
    """
    The output's path, if it can be written without losing anything: `kept` are `(what, path)`
    of the run's other files (the model archive, its fastText models), which `--force` never
    replaces (the same file by path, link or inode is refused, naming both).
    """
    output_path = Path(output_file)
    if output_path.is_dir():
        raise ConfigurationError(f"output file {output_file} is a directory")
    if not output_path.parent.is_dir():
        raise ConfigurationError(f"the directory of output file {output_file} does not exist")
    if same_file(output_path, input_file):
        raise ConfigurationError(f"output file {output_file} is the input file")
    for what, path in kept:
        if path is not None and same_file(output_path, path):
            raise ConfigurationError(
                f"output file {output_file} is {what} {path}: choose another output file "
                "(--force replaces outputs, never the files the run reads)"
            )
    if output_path.exists() and not force:
        raise ConfigurationError(f"output file {output_file} exists; pass --force to replace it")
    if not os.access(output_path.parent, os.W_OK | os.X_OK):
        raise ConfigurationError(f"the directory of output file {output_file} is not writable")
    return output_path


def embed_file(
    archive_file: str,
    input_file: str,
    output_file: str,
    output: str = "all",
    batch_size: int = 64,
    cuda_device: int = -1,
    vectors_path: Optional[str] = None,
    forget_sentences: bool = False,
    embedder=None,
    force: bool = False,
    allow_different_vectors: bool = False,
    lowercase_tokens: bool = False,
) -> Path:
    """
    Writes the ELMo-C vectors of every line of `input_file` to the hdf5 file `output_file` (see
    the module docstring) and returns its path. `embedder`, an `ElmocEmbedder`, is loaded from
    `archive_file` if not given. Inputs are checked before the model is loaded. The output
    file is locked (`common.writer_lock`) while it is written: a second run for it is refused.
    """
    check_positive(batch_size, "--batch-size")
    # Before the lock, whose file goes next to the output: a bad output is named as such.
    _check_output(output_file, input_file, force, _run_files(archive_file, vectors_path))
    lock = _lock_output(output_file)
    try:
        return _embed_file_locked(
            archive_file, input_file, output_file, output, batch_size, cuda_device, vectors_path,
            forget_sentences, embedder, force, allow_different_vectors, lowercase_tokens,
        )
    finally:
        lock.release()


def _run_files(archive_file: str, vectors_path: Optional[str], embedder=None) -> List[Tuple[str, Optional[str]]]:
    """The files a run reads besides its input: the model archive and its fastText models."""
    files = [("the model archive", archive_file), ("the fastText model", vectors_path)]
    archive = getattr(getattr(embedder, "bilm", None), "archive", None)
    for path in sorted(set(getattr(archive, "vectors_overrides", {}).values())):
        files.append(("the fastText model", path))
    return files


def _lock_output(output_file: str) -> WriterLock:
    """The output's `WriterLock`: one `elmoc-embed` per output file, wherever it runs."""
    lock = WriterLock(output_file, FILE)
    try:
        return lock.acquire()
    except OSError as error:  # a folder this user may not write, a read-only file system, /proc
        raise ConfigurationError(
            f"the directory of output file {output_file} is not writable: its lock file "
            f"{lock.path} cannot be created ({error.strerror})"
        ) from None


# Bytes of hdf5 bookkeeping per dataset, on top of its values (measured: about 1.2 KB), and of
# the file itself (superblock, root group, attributes; measured: 5.8 KB for an empty input).
_HDF5_BYTES_PER_DATASET = 4096
_HDF5_BYTES_PER_FILE = 8192


def _sentence_to_index(sentences: List[str]) -> str:
    """The `sentence_to_index` dataset: each distinct line -> its last index, as JSON."""
    return json.dumps({line: str(index) for index, line in enumerate(sentences)})


def _bytes_needed(sentences: List[str], layers: int, dim: int, forget_sentences: bool = False) -> int:
    """An upper bound of the output's size: float32 values, HDF5's bookkeeping, `sentence_to_index`."""
    tokens = sum(len(line.split()) for line in sentences)
    needed = tokens * layers * dim * 4 + len(sentences) * _HDF5_BYTES_PER_DATASET + _HDF5_BYTES_PER_FILE
    # As JSON escapes them: a control character takes 6 bytes, an emoji 12 (was counted as UTF-8).
    return needed + (0 if forget_sentences else len(_sentence_to_index(sentences)))


def _check_free_space(
    output_path: Path, sentences: List[str], layers: int, dim: int, forget_sentences: bool = False
) -> None:
    """
    Refuses, before anything is written, an output the disk cannot hold. A disk that fills later
    (another writer, a quota, `ulimit -f`) is caught write by write: see `_HDF5Output`.
    """
    needed = _bytes_needed(sentences, layers, dim, forget_sentences)
    free = shutil.disk_usage(output_path.parent).free
    if needed > free:
        raise DiskFullError(
            errno.ENOSPC,
            f"output file {output_path} needs about {needed / 1e6:,.1f} MB, and its disk has "
            f"{free / 1e6:,.1f} MB free; nothing was written. Free space, or embed fewer lines.",
        )


def _embed_file_locked(
    archive_file, input_file, output_file, output, batch_size, cuda_device, vectors_path,
    forget_sentences, embedder, force, allow_different_vectors, lowercase_tokens,
) -> Path:
    import h5py

    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    output_path = _check_output(output_file, input_file, force, _run_files(archive_file, vectors_path))
    check_cuda_device(cuda_device, "--cuda-device")
    # The partial file of a killed run (`kill -9`) for the same output: this run holds the
    # output's lock, so no other writer of it runs.
    remove_stale_partial_files(output_path.parent, for_file=output_path.name, locked=True)
    sentences = read_sentences(input_file)
    if embedder is None:
        embedder = ElmocEmbedder(
            archive_file,
            cuda_device=cuda_device,
            vectors_path=vectors_path,
            allow_different_vectors=allow_different_vectors,
            lowercase_tokens=lowercase_tokens,
        )

    # The fastText models the archive reads are known once it is open; nothing is written yet.
    _check_output(output_file, input_file, force, _run_files(archive_file, vectors_path, embedder))
    layers = embedder.num_layers if output == "all" else 1
    _check_free_space(output_path, sentences, layers, embedder.output_dim, forget_sentences)
    with atomic_path(output_path) as temporary, _Signals() as signals:
        raw = _HDF5Output(temporary)
        try:
            with raw, h5py.File(raw, "w") as hdf5:
                hdf5.attrs["archive_file"] = str(archive_file)
                hdf5.attrs["output"] = output
                hdf5.attrs["num_layers"] = embedder.num_layers
                hdf5.attrs["dim"] = embedder.output_dim
                batches = lazy_groups_of(iter(enumerate(sentences)), batch_size)
                total = (len(sentences) + batch_size - 1) // batch_size
                for batch in Tqdm.tqdm(batches, total=total, desc="elmoc-embed", unit="batch"):
                    with signals.outside_hdf5():
                        tokens = [line.split() for _, line in batch]
                        vectors = embedder.embed_batch(tokens, output)
                    for (index, _), array in zip(batch, vectors):
                        if not numpy.isfinite(array).all():
                            raise ConfigurationError(
                                f"line {index + 1} of {input_file} embeds to non-finite values "
                                f"(NaN or infinity): the weights of {archive_file} hold some; "
                                "nothing was written"
                            )
                        hdf5.create_dataset(str(index), data=array)
                        raw.check(output_path)
                    hdf5.flush()  # HDF5 buffers small writes: a full disk stops the first batch
                    raw.check(output_path)
                if not forget_sentences:
                    hdf5.create_dataset(SENTENCE_TO_INDEX, data=_sentence_to_index(sentences))
        except Exception:
            if raw.error is None:
                raise
            # else HDF5 failed on what a failed I/O call left it: that call's error is reported
        raw.check(output_path)  # also the metadata HDF5 wrote when it closed the file
        signals.deliver()
    logger.info("Wrote ELMo-C vectors of %d sentences to %s", len(sentences), output_path)
    return output_path


class _HDF5Output(io.RawIOBase):
    """
    The temporary output file, as h5py's `fileobj` driver writes it, such that a failed write
    never reaches HDF5.

    HDF5 (2.0, through h5py 3.16) is left broken by a write that fails: its own `sec2` driver
    reports a full disk (ENOSPC), a quota (EDQUOT) or a file-size limit (EFBIG, `ulimit -f`) as
    a `RuntimeError` with the errno in its text, every dataset closed afterwards prints another
    traceback ("Can't decrement id ref count"), closing the file fails ("slist already
    enabled?") and the process segfaults (exit 139) when it ends. The free-space check before
    writing cannot prevent this: another process can fill the disk after it, and quotas and
    file-size limits are not free space. Reserving the space up front (`posix_fallocate`) would
    not either: the estimate is approximate, HDF5 truncates the file to its own size at every
    flush, glibc emulates the call block by block where the file system lacks it, and a quota
    or size limit refuses the reservation only where the file system enforces it.

    So the first failed write (or read) is kept in `error`, and it and every later write go to
    memory: HDF5 sees only successful I/O, keeps a consistent state and closes the file normally
    (later reads see what it wrote). The caller calls `check` after each dataset, and after the
    file is closed, which raises one error naming the output; `atomic_path` then deletes the
    temporary file. No exception may leave these methods into HDF5 (see `_Signals`). Writes
    are complete (`pwrite` until every byte is written: the driver ignores a short count),
    unbuffered, and cost one Python call per HDF5 write.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.error: Optional[OSError] = None
        self._descriptor = os.open(path, os.O_RDWR)
        self._position = 0
        self._size = os.fstat(self._descriptor).st_size  # as HDF5 sees it
        self._on_disk = self._size  # the bytes of the file that hold what HDF5 wrote there
        self._in_memory: List[Tuple[int, bytes]] = []  # (offset, data) written after `error`

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer) -> int:
        # The driver ignores the count: the whole buffer is filled, with zeros past the end.
        view = memoryview(buffer).cast("B")
        size = len(view)
        on_disk = max(0, min(size, self._on_disk - self._position))
        done = 0
        while done < on_disk:
            try:
                data = os.pread(self._descriptor, on_disk - done, self._position + done)
            except OSError as error:
                self.error = self.error or error
                break
            if not data:
                break
            view[done:done + len(data)] = data
            done += len(data)
        view[done:] = bytes(size - done)
        for start, data in self._in_memory:
            low, high = max(start, self._position), min(start + len(data), self._position + size)
            if low < high:
                view[low - self._position:high - self._position] = data[low - start:high - start]
        self._position += size
        return size

    def write(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while self.error is None and done < len(view):
            try:
                done += os.pwrite(self._descriptor, view[done:], self._position + done)
            except OSError as error:
                self.error = error
        if self.error is None:
            self._on_disk = max(self._on_disk, self._position + len(view))
        else:
            self._in_memory.append((self._position, bytes(view)))
        self._position += len(view)
        self._size = max(self._size, self._position)
        return len(view)

    def truncate(self, size: Optional[int] = None) -> int:
        size = self._position if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self._descriptor, size)
                self._on_disk = size
            except OSError as error:  # EFBIG: growing past `ulimit -f`
                self.error = error
        self._on_disk = min(self._on_disk, size)
        self._in_memory = [(at, data[:size - at]) for at, data in self._in_memory if at < size]
        self._size = size
        return size

    def close(self) -> None:
        if not self.closed:
            os.close(self._descriptor)
        super().close()

    def check(self, output_path: Path) -> None:
        """Raises the first failed write as an error naming `output_path`, if one failed."""
        if self.error is None:
            return
        if find_disk_full(self.error) is not None:
            raise disk_full_error(output_path, self.error)
        raise OSError(
            self.error.errno,
            f"{self.error.strerror} while writing {output_path}; nothing of it was kept",
        )


class _Signals:
    """
    SIGINT and SIGTERM while an export is written: SIGINT raises `KeyboardInterrupt` (unless its
    handler is not Python's default) and SIGTERM `SystemExit(128 + 15)`, so that clean-up code
    runs, but never inside HDF5. h5py calls `_HDF5Output` back from inside HDF5, where an
    exception leaves HDF5 as broken as a failed write does (the interrupt is lost, closing the
    file fails); so a signal that arrives there is held, and raised at once while the export is
    outside HDF5 (`outside_hdf5`: while it embeds) or when HDF5 is done (`deliver`).
    Only the main thread runs signal handlers: elsewhere this does nothing.
    """

    def __init__(self) -> None:
        self._previous = {}
        self._held: Optional[int] = None
        self._outside = False

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            signals = [signal.SIGTERM]
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signals.append(signal.SIGINT)
            for number in signals:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exception) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)

    def _handle(self, number, frame) -> None:
        if self._held is None:
            self._held = number
        if self._outside:
            self.deliver()

    def deliver(self) -> None:
        """Raises for the signal held, if one arrived."""
        number, self._held = self._held, None
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        if number is not None:
            raise SystemExit(128 + number)

    @contextmanager
    def outside_hdf5(self) -> Iterator[None]:
        """A block that runs no HDF5 code: a signal raises at once."""
        self.deliver()
        self._outside = True
        try:
            yield
        finally:
            self._outside = False
