"""
Which lines of a corpus each of the `R * W` readers reads in an epoch, in which order, and the
`EpochLengthError` of a lost or repeated line (docs/scale_and_fault_tolerance.md, "Contiguous shares").
"""

import glob
import logging
import os
from os import PathLike
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import numpy
import torch.distributed as dist

from allennlp.common import util
from allennlp.common.checks import ConfigurationError
from allennlp.data.tokenizers import Tokenizer, WhitespaceTokenizer

from elmoc_allennlp.data.dataset_readers.corpus_index import (
    INVALID_LINE,
    CorpusDecodingError,
    CorpusIndex,
    decoding_error,
    load_indexes,
    read_lines,
)

logger = logging.getLogger(__name__)

# What a line is, for a reader: blank, text, invalid UTF-8 (skipped) or too long (skipped).
_BLANK, _TEXT, _INVALID, _LONG = 0, 1, 2, 3
_NO_END = 1 << 62
# Skipped lines named individually in the log, per read.
_MAX_SKIP_WARNINGS = 10


class EpochLengthError(ConfigurationError):
    """An epoch that read other lines, instances or batches than the corpus index counted."""


class ShareSettings(NamedTuple):
    """The reader's settings that decide which lines it reads and what each line gives."""

    mode: str  # "sentence" or "window"
    max_sequence_length: int  # sentence mode: tokens per instance
    long_sentences: str  # sentence mode: "split" or "truncate"
    window_length: int  # window mode: tokens each window predicts
    boundary_tokens: int  # tokens added to each sentence (0, 1 or 2)
    tokenizer: Tokenizer
    invalid_lines: str  # "error" or "skip"
    max_line_bytes: Optional[int]
    max_token_characters: Optional[int]  # (only: whether truncated tokens are counted)
    shuffle: bool
    seed: int
    index_directory: Optional[str]


class ReaderSlot(NamedTuple):
    """A reader's place: process `rank` of `world_size`, loader worker `worker` of `num_workers`."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    @property
    def index(self) -> int:
        return self.rank * self.num_workers + self.worker

    @property
    def count(self) -> int:
        return self.world_size * self.num_workers

    def __str__(self) -> str:
        return (
            f"share {self.index + 1} of {self.count} (rank {self.rank} of {self.world_size}, "
            f"loader worker {self.worker} of {self.num_workers})"
        )


class ReadStatistics:
    """The counts of one read of a share (`last_read_statistics`); `_OPTIONAL` ones only with their option."""

    _ALWAYS = (
        "files",
        "lines",
        "blank_lines_skipped",
        "sentences",
        "sentences_split",
        "sentences_truncated",
        "tokens",
        "instances",
        "bytes",
    )
    _OPTIONAL = ("invalid_lines_skipped", "long_lines_skipped", "tokens_truncated")
    __slots__ = _ALWAYS + _OPTIONAL

    def __init__(self, settings: ShareSettings) -> None:
        for key in self._ALWAYS:
            setattr(self, key, 0)
        kept = (
            settings.invalid_lines == "skip",
            settings.max_line_bytes is not None,
            settings.max_token_characters is not None,
        )
        for key, keep in zip(self._OPTIONAL, kept):
            setattr(self, key, 0 if keep else None)

    @property
    def skipped(self) -> int:
        return (self.invalid_lines_skipped or 0) + (self.long_lines_skipped or 0)

    def as_dict(self) -> Dict[str, int]:
        counts = {key: getattr(self, key) for key in self._ALWAYS + self._OPTIONAL}
        return {key: value for key, value in counts.items() if value is not None}


class ShareLine(NamedTuple):
    """A line a share reads: where it is, where its units start in the epoch, its text."""

    path: str
    line_number: int  # 1-based
    start: int  # its first unit (instance, or stream token in window mode) in the epoch's order
    text: str
    own: bool  # counted in this share's statistics (each line is owned by one share)
    tokens: int  # its number of tokens, by the index (or the reader's tokenizer)


class CorpusPlan(NamedTuple):
    """A corpus's indexes and, per file and line, what the line gives in a reader's mode."""

    indexes: List[CorpusIndex]
    kinds: List[numpy.ndarray]  # _BLANK, _TEXT, _INVALID or _LONG
    lengths: List[numpy.ndarray]  # tokens (by the reader's tokenizer)
    units: List[numpy.ndarray]  # instances (sentence mode) or stream tokens (window mode)
    totals: numpy.ndarray  # units per file
    total_units: int
    num_instances: int


def process_rank(distributed_info) -> Tuple[int, int]:
    """This process's rank and the number of processes (`distributed_info`: a reader's, if set)."""
    if distributed_info is not None:
        return distributed_info.global_rank, distributed_info.world_size
    if util.is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def share_bounds(total: int, slot: int, num_slots: int) -> Tuple[int, int]:
    """The contiguous share `[first, end)` of `total` instances of reader `slot` of `num_slots`."""
    return total * slot // num_slots, total * (slot + 1) // num_slots


def corpus_files(file_path: Any) -> List[str]:
    """The files to read, in sorted order for a directory or glob; a list in its order."""
    if isinstance(file_path, (list, tuple)):
        if not file_path:
            raise ConfigurationError("Empty list of corpus paths")
        return [path for one_path in file_path for path in corpus_files(one_path)]
    if not isinstance(file_path, (str, PathLike)):
        raise ConfigurationError(
            f"Corpus path must be a file, directory or glob pattern, got {file_path!r}"
        )
    if not str(file_path).strip():
        raise ConfigurationError(
            f"The corpus path is empty ({str(file_path)!r}): no file to read (an unset variable?)"
        )
    pattern = os.path.expanduser(str(file_path))
    if os.path.isfile(pattern):
        return [pattern]
    if os.path.isdir(pattern):
        paths = [
            os.path.join(pattern, name)
            for name in sorted(os.listdir(pattern))
            if not name.startswith(".")
        ]
        paths = [path for path in paths if os.path.isfile(path)]
        if not paths:
            raise ConfigurationError(f"Corpus directory {str(file_path)!r} contains no files")
        return paths
    paths = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
    if not paths:
        raise ConfigurationError(f"No corpus files found matching {str(file_path)!r}")
    return paths


def _plan_corpus(
    file_path: Any, paths: List[str], indexes: List[CorpusIndex], settings: ShareSettings
) -> CorpusPlan:
    kinds, lengths, units = [], [], []
    any_text = False
    for index in indexes:
        line_kinds = numpy.where(index.tokens == 0, _BLANK, _TEXT).astype(numpy.uint8)
        line_kinds[index.tokens == INVALID_LINE] = _INVALID
        if settings.max_line_bytes is not None:
            line_kinds[index.line_bytes() > settings.max_line_bytes] = _LONG
        any_text = any_text or bool(numpy.any(line_kinds != _BLANK))
        invalid = numpy.flatnonzero(line_kinds == _INVALID)
        if len(invalid) and settings.invalid_lines == "error":
            raise decoding_error(index, int(invalid[0]))
        line_tokens = index.tokens
        if type(settings.tokenizer) is not WhitespaceTokenizer:
            line_tokens = _tokenizer_counts(index, line_kinds, settings.tokenizer)
        if settings.mode == "sentence":
            line_units = numpy.ones(len(line_tokens), dtype=numpy.int32)
            if settings.long_sentences == "split":
                line_units = numpy.maximum(1, -(-line_tokens // settings.max_sequence_length))
        else:
            line_units = line_tokens + settings.boundary_tokens
        kinds.append(line_kinds)
        lengths.append(line_tokens)
        units.append(numpy.where(line_kinds == _TEXT, line_units, 0).astype(numpy.int32))
    if not any_text:
        shown = ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
        raise ConfigurationError(
            f"The corpus {file_path} has no text: its {len(paths)} file(s) are empty or blank ({shown})"
        )
    totals = numpy.array([int(u.sum()) for u in units], dtype=numpy.int64)
    total_units = int(totals.sum())
    if settings.mode == "sentence":
        num_instances = total_units
    else:
        num_instances = -(-(total_units - 1) // settings.window_length) if total_units >= 2 else 0
    return CorpusPlan(indexes, kinds, lengths, units, totals, total_units, num_instances)


def _tokenizer_counts(
    index: CorpusIndex, kinds: numpy.ndarray, tokenizer: Tokenizer
) -> numpy.ndarray:
    """Each line's number of tokens by a (not whitespace) tokenizer: one pass."""
    counts = index.tokens.copy()
    for line, raw_line in read_lines(index, numpy.flatnonzero(kinds == _TEXT)):
        counts[line] = len(tokenizer.tokenize(raw_line.decode("utf-8")))
    return counts


class CorpusShares:
    """The plans of the corpora a reader reads (cached) and the shares of their epochs."""

    def __init__(self, settings: ShareSettings) -> None:
        self.settings = settings
        self._plans: Dict[Tuple[str, ...], Tuple[Tuple[int, ...], CorpusPlan]] = {}

    def __getstate__(self) -> Dict[str, Any]:
        # Loader workers rebuild their plans (from the indexes loaded in this process, if forked).
        return {"settings": self.settings, "_plans": {}}

    def plan(self, file_path: Any) -> CorpusPlan:
        """The corpus's indexes and what each line gives in the reader's mode (cached)."""
        paths = corpus_files(file_path)
        indexes = load_indexes(paths, self.settings.index_directory)
        key = tuple(id(index) for index in indexes)
        cached = self._plans.get(tuple(paths))
        if cached is not None and cached[0] == key:
            return cached[1]
        plan = _plan_corpus(file_path, paths, indexes, self.settings)
        self._plans[tuple(paths)] = (key, plan)
        return plan

    def share_sizes(
        self, file_path: Any, rank: int, world_size: int, num_workers: int
    ) -> List[int]:
        """The number of instances of each loader worker of process `rank` (from the index)."""
        total = self.plan(file_path).num_instances
        count = world_size * num_workers
        bounds = (
            share_bounds(total, rank * num_workers + worker, count) for worker in range(num_workers)
        )
        return [end - first for first, end in bounds]

    def share(self, file_path: Any, slot: ReaderSlot, epoch: Optional[int]) -> "CorpusShare":
        """The share of reader `slot` of the epoch `epoch` (`None`: corpus order) of `file_path`."""
        return CorpusShare(self.settings, self.plan(file_path), slot, epoch, str(file_path))


class CorpusShare:
    """One reader's share of an epoch: instances `first` to `end - 1`, the units it needs and owns."""

    def __init__(
        self,
        settings: ShareSettings,
        plan: CorpusPlan,
        slot: ReaderSlot,
        epoch: Optional[int],
        corpus: str,
    ) -> None:
        self.settings, self.plan, self.slot, self.epoch, self.corpus = (
            settings,
            plan,
            slot,
            epoch,
            corpus,
        )
        self.first, self.end = share_bounds(plan.num_instances, slot.index, slot.count)
        length = 1 if settings.mode == "sentence" else settings.window_length
        self.need = (self.first * length, min(self.end * length + (length > 1), plan.total_units))
        if self.end <= self.first:
            self.need = (0, 0)
        self.own = (
            self.first * length,
            _NO_END if slot.index == slot.count - 1 else self.end * length,
        )
        self.statistics = ReadStatistics(settings)

    def _order(self, count: int, *key: int) -> numpy.ndarray:
        """The epoch's order of `count` files (`key` 0) or lines (1, file number): drawn when shuffling."""
        if self.settings.shuffle and self.epoch is not None:
            return numpy.random.default_rng(
                [self.settings.seed % 2**64, self.epoch, *key]
            ).permutation(count)
        return numpy.arange(count)

    def line_order(self, file_number: int) -> numpy.ndarray:
        return self._order(self.plan.indexes[file_number].num_lines, 1, file_number)

    def _files(self) -> Iterator[Tuple[int, int]]:
        """`(file number, its first unit)` of the files in the epoch's order."""
        position = 0
        for file_number in self._order(len(self.plan.indexes), 0).tolist():
            yield file_number, position
            position += int(self.plan.totals[file_number])

    def lines(self) -> Iterator[ShareLine]:
        """The lines whose units overlap `need` or start in `own`, in the epoch's order."""
        need, own, plan = self.need, self.own, self.plan
        for file_number, start in self._files():
            total = int(plan.totals[file_number])
            touches_need = total > 0 and start < need[1] and start + total > need[0]
            if touches_need or (start <= own[1] - 1 and start + total >= own[0]):
                wanted = self._wanted_lines(file_number, start)
                if len(wanted[0]):
                    yield from self._file_lines(file_number, *wanted)

    def _wanted_lines(
        self, file_number: int, start: int
    ) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
        """`(line numbers, first units, owned)` of a file's lines this reader needs; counts those it owns."""
        need, own, plan = self.need, self.own, self.plan
        order = self.line_order(file_number)
        units = plan.units[file_number][order]
        starts = numpy.cumsum(units, dtype=numpy.int64)
        starts -= units
        starts += start
        kinds = plan.kinds[file_number][order]
        owned = (starts >= own[0]) & (starts < own[1])
        self._count_owned(plan.indexes[file_number], order[owned], kinds[owned])
        wanted = (units > 0) & (starts < need[1]) & (starts + units > need[0])
        wanted |= owned & (kinds == _TEXT)
        return order[wanted], starts[wanted], owned[wanted]

    def _count_owned(self, index: CorpusIndex, lines: numpy.ndarray, kinds: numpy.ndarray) -> None:
        statistics = self.statistics
        counts = numpy.bincount(kinds, minlength=4)
        statistics.lines += len(lines)
        statistics.blank_lines_skipped += int(counts[_BLANK])
        for kind, key, why in (
            (_INVALID, "invalid_lines_skipped", "invalid UTF-8"),
            (_LONG, "long_lines_skipped", f"longer than {self.settings.max_line_bytes} bytes"),
        ):
            if not counts[kind]:
                continue
            for line in lines[kinds == kind][:_MAX_SKIP_WARNINGS].tolist():
                setattr(statistics, key, getattr(statistics, key) + 1)
                if statistics.skipped <= _MAX_SKIP_WARNINGS:
                    if kind == _INVALID:
                        error = decoding_error(index, line)
                        why = f"invalid UTF-8 at byte offset {error.byte_offset} ({error.reason})"
                    last = statistics.skipped == _MAX_SKIP_WARNINGS
                    more = " (further skipped lines are only counted)" if last else ""
                    logger.warning("%s, line %d: skipped, %s%s", index.path, line + 1, why, more)
            extra = int(counts[kind]) - min(int(counts[kind]), _MAX_SKIP_WARNINGS)
            setattr(statistics, key, getattr(statistics, key) + extra)

    def _file_lines(
        self, file_number: int, numbers: numpy.ndarray, starts: numpy.ndarray, owned: numpy.ndarray
    ) -> Iterator[ShareLine]:
        """The lines `numbers` (0-based) of a file, read once each and in this order, or an error."""
        index = self.plan.indexes[file_number]
        lengths = self.plan.lengths[file_number]
        source = read_lines(index, numbers, self.statistics)
        # One line of the source per line planned (a generator zipped after lists would lose one
        # line at each list's end), the plan's arrays as memory views (Python ints, no lists).
        planned = zip(*(memoryview(array) for array in (numbers, starts, owned, lengths[numbers])))
        for number, start, own, tokens in planned:
            line, raw_line = next(source, (None, b""))
            if line != number:
                got = f"line {line + 1}" if line is not None else "no line"
                raise EpochLengthError(
                    f"{index.path}, line {number + 1}: lost by {self.slot} of the epoch of {self.corpus} "
                    f"(the line source gave {got} in its place, of {len(numbers)} lines planned in this file)"
                )
            try:
                text = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise CorpusDecodingError(
                    index.path, number + 1, error.start, error.reason
                ) from None
            yield ShareLine(index.path, number + 1, start, text, own, tokens)
        extra = next(source, None)
        if extra is not None:
            raise EpochLengthError(
                f"{index.path}, line {extra[0] + 1}: read by {self.slot} of the epoch of {self.corpus} "
                f"after the {len(numbers)} lines its index planned in this file (a line read twice?)"
            )

    def lost_instances(self, expected: int, got: Optional[int]) -> EpochLengthError:
        """The error of a read that gave instance `got` (`None`: no more) where `expected` was due."""
        wanted = self.end - self.first
        if expected >= self.end:
            return EpochLengthError(
                f"{self.slot} of the epoch of {self.corpus} read instance {got} past its last, {self.end - 1} "
                f"({wanted} instances by its index)"
            )
        read = (
            f"instance {got} in its place" if got is not None else f"only {expected - self.first}"
        )
        where = self.locate(expected)
        source = f"; it comes from {where[0]}, line {where[1]}" if where else ""
        return EpochLengthError(
            f"{self.slot} of the epoch of {self.corpus} lost instance {expected} (of instances "
            f"{self.first} to {self.end - 1}, {wanted} by its index; read {read}){source}"
        )

    def locate(self, instance: int) -> Optional[Tuple[str, int]]:
        """The file and line (1-based) that give instance `instance` of the epoch (`None`: none)."""
        unit = (
            instance if self.settings.mode == "sentence" else instance * self.settings.window_length
        )
        for file_number, start in self._files():
            total = int(self.plan.totals[file_number])
            if start <= unit < start + total:
                order = self.line_order(file_number)
                ends = numpy.cumsum(self.plan.units[file_number][order], dtype=numpy.int64) + start
                line = int(order[int(numpy.searchsorted(ends, unit, side="right"))])
                return self.plan.indexes[file_number].path, line + 1
        return None
