"""
The `elmoc-embed` subcommand: ELMo-C vectors of every line of a text file, one hdf5 dataset per
line (as the removed `allennlp elmo` did); its safeguards: docs/trust_and_safety.md.
"""

import argparse
import contextlib
import errno
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator, List, Optional

import numpy

from allennlp.commands.subcommand import Subcommand
from allennlp.common import logging as common_logging
from allennlp.common.checks import ConfigurationError
from allennlp.common.tqdm import Tqdm
from allennlp.common.util import lazy_groups_of

from elmoc_allennlp.commands.hdf5_output import HDF5Output, HeldSignals
from elmoc_allennlp.commands.subcommand import PluginSubcommand, check_output
from elmoc_allennlp.common.atomic_files import atomic_path, remove_stale_partial_files
from elmoc_allennlp.common.checks import check_cuda_device, check_positive
from elmoc_allennlp.common.disk_full import DiskFullError
from elmoc_allennlp.common.precision import check_device, check_dtype
from elmoc_allennlp.common.writer_lock import FILE, WriterLock

logger = logging.getLogger(__name__)

# allennlp logs each parameter it reads building the biLM from its archive's config (about 100 lines)
# and each parameter its initializers leave as loaded, at INFO: the command shows warnings of them only.
_PARAMETER_LOGGERS = ("allennlp.common.params", "allennlp.nn.initializers")


@contextlib.contextmanager
def quiet_parameter_logs() -> Iterator[None]:
    """Within the block, allennlp's per-parameter INFO lines are not logged (warnings still are)."""
    loggers = [logging.getLogger(name) for name in _PARAMETER_LOGGERS]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.setLevel(max(each.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for each, level in zip(loggers, levels):
            each.setLevel(level)


SENTENCE_TO_INDEX = "sentence_to_index"


@Subcommand.register("elmoc-embed")
class ElmocEmbed(PluginSubcommand):
    description = (
        "Write the ELMo-C representations of every line of a file (one whitespace-tokenized "
        "sentence per line) to an hdf5 file: one dataset per line, named by its 0-based index."
    )
    help = "Export ELMo-C vectors to hdf5."

    def add_own_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("archive_file", help="a biLM model.tar.gz")
        parser.add_argument("input_file", help="one tokenized sentence per line")
        parser.add_argument("output_file", help="the hdf5 file to write")
        layers = parser.add_mutually_exclusive_group(required=True)
        layers.add_argument(
            "--all", action="store_true", help="every layer: (num_layers, num_tokens, dim)"
        )
        layers.add_argument("--top", action="store_true", help="the top layer: (num_tokens, dim)")
        layers.add_argument(
            "--average", action="store_true", help="the mean of the layers: (num_tokens, dim)"
        )
        parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
        parser.add_argument(
            "--cuda-device", type=int, default=-1, help="the GPU to use; -1 for the CPU"
        )
        parser.add_argument(
            "--vectors-path",
            default=None,
            help="the biLM's fastText .bin, if it is not where the archive says",
        )
        parser.add_argument(
            "--allow-different-vectors",
            action="store_true",
            help="accept a fastText .bin other than the one the biLM was trained with",
        )
        parser.add_argument(
            "--lowercase-tokens",
            action="store_true",
            help="lowercase tokens for a biLM whose input is not fastText",
        )
        parser.add_argument(
            "--dtype",
            default="float32",
            metavar="{float32,bfloat16,int8}",
            help="the precision the biLM runs in: float32 (as trained), bfloat16 (where the CPU or "
            "GPU has native bfloat16, else float32 with a warning) or int8 (its linear maps "
            "dynamically quantized; CPU only); the vectors written are float32 in every case",
        )
        parser.add_argument(
            "--forget-sentences",
            action="store_true",
            help=f"do not write the {SENTENCE_TO_INDEX} dataset",
        )
        parser.add_argument(
            "--file-friendly-logging",
            action="store_true",
            help="outputs tqdm status on separate lines and slows tqdm refresh rate",
        )

    @staticmethod
    def run(args: argparse.Namespace) -> None:
        common_logging.FILE_FRIENDLY_LOGGING = args.file_friendly_logging
        with quiet_parameter_logs():
            embed_file(
                args.archive_file,
                args.input_file,
                args.output_file,
                output="all" if args.all else "top" if args.top else "average",
                batch_size=args.batch_size,
                cuda_device=args.cuda_device,
                vectors_path=args.vectors_path,
                forget_sentences=args.forget_sentences,
                force=args.force,
                allow_different_vectors=args.allow_different_vectors,
                lowercase_tokens=args.lowercase_tokens,
                dtype=args.dtype,
            )


def read_sentences(input_file: str) -> List[str]:
    """The lines of `input_file` (UTF-8), ended at `\n` (and `\r\n`) only: dataset `i` is line `i + 1`."""
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
    output_file: str,
    input_file: str,
    force: bool,
    archive_file: str,
    vectors_path: Optional[str],
    embedder=None,
) -> Path:
    """
    `check_output` against the run's inputs (the fastText models once `embedder` is open), in a
    writable folder.
    """
    inputs = [
        ("the input file", input_file),
        ("the model archive", archive_file),
        ("the fastText model", vectors_path),
    ]
    archive = getattr(getattr(embedder, "bilm", None), "archive", None)
    inputs += [
        ("the fastText model", path)
        for path in sorted(set(getattr(archive, "vectors_overrides", {}).values()))
    ]
    output_path = check_output(output_file, force, inputs)
    if not output_path.parent.is_dir():
        raise ConfigurationError(f"the directory of output file {output_file} does not exist")
    if not os.access(output_path.parent, os.W_OK | os.X_OK):
        raise ConfigurationError(f"the directory of output file {output_file} is not writable")
    return output_path


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


def _bytes_needed(
    sentences: List[str], layers: int, dim: int, forget_sentences: bool = False
) -> int:
    """An upper bound of the output's size: float32 values, HDF5's bookkeeping, `sentence_to_index`."""
    tokens = sum(len(line.split()) for line in sentences)
    needed = (
        tokens * layers * dim * 4 + len(sentences) * _HDF5_BYTES_PER_DATASET + _HDF5_BYTES_PER_FILE
    )
    # As JSON escapes them: a control character takes 6 bytes, an emoji 12.
    return needed + (0 if forget_sentences else len(_sentence_to_index(sentences)))


def _check_free_space(output_path: Path, needed: int) -> None:
    """Refuses, before anything is written, an output the disk cannot hold (later: `HDF5Output`)."""
    free = shutil.disk_usage(output_path.parent).free
    if needed > free:
        raise DiskFullError(
            errno.ENOSPC,
            f"output file {output_path} needs about {needed / 1e6:,.1f} MB, and its disk has "
            f"{free / 1e6:,.1f} MB free; nothing was written. Free space, or embed fewer lines.",
        )


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
    dtype: str = "float32",
) -> Path:
    """
    Writes the ELMo-C vectors of every line of `input_file` to the hdf5 file `output_file`, locked
    while written, and returns its path; `embedder` (an `ElmocEmbedder`, run at `dtype`) is loaded
    if not given.
    """
    import h5py

    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    check_positive(batch_size, "--batch-size")
    check_dtype(dtype, "--dtype")
    # Before the lock, whose file goes next to the output: a bad output is named as such.
    _check_output(output_file, input_file, force, archive_file, vectors_path)
    lock = _lock_output(output_file)
    try:
        output_path = _check_output(output_file, input_file, force, archive_file, vectors_path)
        check_cuda_device(cuda_device, "--cuda-device")
        check_device(dtype, "cpu" if cuda_device < 0 else f"cuda:{cuda_device}", "--dtype")
        # The partial file of a killed run (`kill -9`): this run holds the output's lock.
        remove_stale_partial_files(output_path.parent, for_file=output_path.name, locked=True)
        sentences = read_sentences(input_file)
        if embedder is None:
            embedder = ElmocEmbedder(
                archive_file,
                cuda_device=cuda_device,
                vectors_path=vectors_path,
                allow_different_vectors=allow_different_vectors,
                lowercase_tokens=lowercase_tokens,
                dtype=dtype,
            )
        # The fastText models the archive reads are known once it is open; nothing is written yet.
        _check_output(output_file, input_file, force, archive_file, vectors_path, embedder)
        layers = embedder.num_layers if output == "all" else 1
        _check_free_space(
            output_path, _bytes_needed(sentences, layers, embedder.output_dim, forget_sentences)
        )
        with atomic_path(output_path) as temporary, HeldSignals() as signals:
            raw = HDF5Output(temporary)
            try:
                with raw, h5py.File(raw, "w") as hdf5:
                    hdf5.attrs["archive_file"] = str(archive_file)
                    hdf5.attrs["output"] = output
                    hdf5.attrs["num_layers"] = embedder.num_layers
                    hdf5.attrs["dim"] = embedder.output_dim
                    # The precision the biLM ran at (bfloat16 without native units: float32).
                    hdf5.attrs["dtype"] = getattr(embedder, "running_dtype", "float32")
                    batches = lazy_groups_of(iter(enumerate(sentences)), batch_size)
                    total = (len(sentences) + batch_size - 1) // batch_size
                    for batch in Tqdm.tqdm(batches, total=total, desc="elmoc-embed", unit="batch"):
                        with signals.outside_hdf5():
                            vectors = embedder.embed_batch(
                                [line.split() for _, line in batch], output
                            )
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
    finally:
        lock.release()
    logger.info("Wrote ELMo-C vectors of %d sentences to %s", len(sentences), output_path)
    return output_path
