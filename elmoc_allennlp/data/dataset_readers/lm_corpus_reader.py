"""A lazy, shardable reader of tokenized language-modelling corpora, one sentence per line."""
import glob
import logging
import os
from os import PathLike
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple, Union

import numpy
import torch.distributed as dist

from allennlp.common import util
from allennlp.common.checks import ConfigurationError
from allennlp.data.dataset_readers.dataset_reader import DatasetReader, PathOrStr
from allennlp.data.fields import TextField
from allennlp.data.instance import Instance
from allennlp.data.token_indexers import SingleIdTokenIndexer, TokenIndexer
from allennlp.data.tokenizers import Token, Tokenizer, WhitespaceTokenizer

from elmoc_allennlp.common.checks import check_one_of, check_positive_int
from elmoc_allennlp.data.dataset_readers.corpus_index import INVALID_LINE, CorpusIndex, load_indexes

logger = logging.getLogger(__name__)

# The boundary tokens a sentence gets by default (ELMo's; the fastText indexer's defaults too).
DEFAULT_START_TOKEN, DEFAULT_END_TOKEN = "<S>", "</S>"

_STATISTICS = (
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
# Skipped lines named individually in the log, per read.
_MAX_SKIP_WARNINGS = 10
# What a line is, for the reader: blank, text, invalid UTF-8 (skipped) or too long (skipped).
_BLANK, _TEXT, _INVALID, _LONG = 0, 1, 2, 3
_NO_END = 1 << 62
# Lines are read in blocks of about this many bytes (in the epoch's order).
_BLOCK_BYTES = 1 << 18
# Lines closer than this are read with one read, with the bytes between them.
_MAX_GAP_BYTES = 64


def _share(total: int, slot: int, num_slots: int) -> Tuple[int, int]:
    """The contiguous share `[first, end)` of `total` instances of reader `slot` of `num_slots`."""
    return total * slot // num_slots, total * (slot + 1) // num_slots


class _Plan(NamedTuple):
    """A corpus's indexes and, per file and line, what the line gives in a reader's mode."""

    indexes: List[CorpusIndex]
    kinds: List[numpy.ndarray]  # _BLANK, _TEXT, _INVALID or _LONG
    lengths: List[numpy.ndarray]  # tokens (by the reader's tokenizer)
    units: List[numpy.ndarray]  # instances (sentence mode) or stream tokens (window mode)
    totals: numpy.ndarray  # units per file
    total_units: int
    num_instances: int


def _read_lines(
    index: CorpusIndex, line_numbers: numpy.ndarray, statistics: Dict[str, int]
) -> Iterator[Tuple[int, bytes]]:
    """
    `(line, raw line without its line break)` of the lines `line_numbers` (0-based) of a file, in
    that order, in blocks of about `_BLOCK_BYTES` (each block's lines sorted by position, close
    neighbours read with one read): the file is opened only if a line is asked for.
    """
    if not len(line_numbers):
        return
    offsets = index.offsets.astype(numpy.int64)
    sizes = offsets[line_numbers + 1] - offsets[line_numbers]
    # A block ends after the line at which its bytes reach _BLOCK_BYTES.
    block_ends = (numpy.flatnonzero(numpy.diff(numpy.cumsum(sizes) // _BLOCK_BYTES)) + 1).tolist()
    block_ends.append(len(line_numbers))
    with open(index.path, "rb", buffering=0) as corpus:
        statistics["files"] += 1
        block_start = 0
        for block_end in block_ends:
            if block_end <= block_start:
                continue
            block = line_numbers[block_start:block_end]
            block_start = block_end
            ordered = numpy.unique(block)
            gaps = offsets[ordered[1:]] - offsets[ordered[:-1] + 1]
            run_starts = numpy.concatenate([[0], numpy.flatnonzero(gaps > _MAX_GAP_BYTES) + 1]).astype(int)
            run_ends = numpy.append(run_starts[1:], len(ordered))
            raw: Dict[int, bytes] = {}
            for run_start, run_end in zip(run_starts.tolist(), run_ends.tolist()):
                low, high = int(offsets[ordered[run_start]]), int(offsets[ordered[run_end - 1] + 1])
                corpus.seek(low)
                data = memoryview(bytearray(high - low))
                done = 0
                while done < high - low:
                    read = corpus.readinto(data[done:])
                    if not read:
                        raise ConfigurationError(f"{index.path} is shorter than when it was indexed")
                    done += read
                statistics["bytes"] += done
                for line in ordered[run_start:run_end].tolist():
                    line_end = int(offsets[line + 1]) - int(index.breaks[line])
                    raw[line] = bytes(data[int(offsets[line]) - low : line_end - low])
                del data
            for line in block.tolist():
                yield line, raw[line]


class CorpusDecodingError(ConfigurationError):
    """A corpus line that is not valid UTF-8, naming the file, line and byte offset in the line."""

    def __init__(self, path: str, line_number: int, byte_offset: int, reason: str) -> None:
        super().__init__(f"{path}, line {line_number}: invalid UTF-8 at byte offset {byte_offset} ({reason})")
        self.path = path
        self.line_number = line_number
        self.byte_offset = byte_offset
        self.reason = reason

    def __reduce__(self):
        # Picklable, as it may be raised in a data-loader worker process.
        return type(self), (self.path, self.line_number, self.byte_offset, self.reason)


@DatasetReader.register("elmoc_lm_corpus")
class LanguageModelCorpusReader(DatasetReader):
    """
    Reads a tokenized corpus, one sentence per line, for biLM pretraining: instances with one
    `TextField` "tokens", each a sentence with its boundary tokens (mode `"sentence"`), or windows
    of `window_length + 1` tokens of the stream of all sentences (mode `"window"`, Li et al. 2019,
    section 5.2.2). `file_path` is a file, a directory, a glob pattern or a list of them; one
    that matches no file is an error naming it.

    Each corpus file is indexed once (`corpus_index.py`: the offset and token count of every
    line, cached beside it). With the index, the epoch's instances (in the order drawn from
    `(seed, epoch)` with `shuffle` and `set_epoch`, else in corpus order) are cut into `R * W`
    contiguous, equal shares for the `R * W` readers of `R` processes of `W` loader workers:
    each reader reads only its own lines, opens only their files, and every instance is read
    once per epoch (`docs/scale_and_fault_tolerance.md`). The epoch's length is known without
    reading (`share_sizes`, which the `elmoc_corpus` data loader uses). The counts of the last
    read (of this reader's share) are in `last_read_statistics`.

    Registered as a `DatasetReader` with name "elmoc_lm_corpus".

    # Parameters

    token_indexers : `Dict[str, TokenIndexer]`, optional
        Indexers for the "tokens" field. Defaults to `{"tokens": SingleIdTokenIndexer()}`.
    tokenizer : `Tokenizer`, optional (default = `WhitespaceTokenizer()`)
        Splits a line into tokens.
    max_sequence_length : `int`, optional (default = `200` in sentence mode)
        Sentence mode: the maximum number of tokens of an instance, without boundary tokens.
    long_sentences : `str`, optional (default = `"split"`)
        Sentence mode: `"split"` longer sentences into chunks, or `"truncate"` them.
    mode : `str`, optional (default = `"sentence"`)
        `"sentence"` or `"window"`, see above.
    window_length : `int`, optional (default = `20`)
        Window mode: the number of tokens each LM predicts per window.
    start_token : `str`, optional (default = `"<S>"`)
        Prepended to every instance; `None` or `""` to add nothing.
    end_token : `str`, optional (default = `"</S>"`)
        Appended to every instance; `None` or `""` to add nothing.
    invalid_lines : `str`, optional (default = `"error"`)
        A line that is not UTF-8: `"error"` raises a `CorpusDecodingError`; `"skip"` skips it.
    max_line_bytes : `int`, optional (default = `None`)
        Longer lines are skipped without being held in memory whole.
    max_token_characters : `int`, optional (default = `None`)
        Longer tokens are truncated (ELMo caps tokens at 50 characters).
    shuffle : `bool`, optional (default = `False`)
        Read each epoch in a new order drawn from `(seed, epoch)`.
    seed : `int`, optional (default = `0`)
        The seed of the per-epoch order.
    index_directory : `str`, optional (default = allennlp's cache directory + `elmoc_corpus_index`)
        Where the corpus index of a file goes when the file's folder is read-only (else it is
        written beside the file, hidden: `corpus_index.py`).
    """

    def __init__(
        self,
        token_indexers: Dict[str, TokenIndexer] = None,
        tokenizer: Tokenizer = None,
        max_sequence_length: Optional[int] = None,
        long_sentences: str = "split",
        mode: str = "sentence",
        window_length: int = 20,
        start_token: Optional[str] = DEFAULT_START_TOKEN,
        end_token: Optional[str] = DEFAULT_END_TOKEN,
        invalid_lines: str = "error",
        max_line_bytes: Optional[int] = None,
        max_token_characters: Optional[int] = None,
        shuffle: bool = False,
        seed: int = 0,
        index_directory: Optional[str] = None,
        **kwargs,
    ) -> None:
        super().__init__(
            manual_distributed_sharding=True, manual_multiprocess_sharding=True, **kwargs
        )
        check_one_of(mode, ("sentence", "window"), "mode")
        if mode == "window" and max_sequence_length is not None:
            raise ConfigurationError("max_sequence_length applies to mode 'sentence' only")
        if max_sequence_length is None:
            max_sequence_length = 200
        check_positive_int(max_sequence_length, "max_sequence_length")
        check_positive_int(window_length, "window_length")
        check_one_of(long_sentences, ("split", "truncate"), "long_sentences")
        check_one_of(invalid_lines, ("error", "skip"), "invalid_lines")
        check_positive_int(max_line_bytes, "max_line_bytes", allow_none=True)
        check_positive_int(max_token_characters, "max_token_characters", allow_none=True)
        self._shuffle = shuffle
        self._seed = seed
        self._epoch: Optional[int] = None
        self._invalid_lines = invalid_lines
        self._max_line_bytes = max_line_bytes
        self._max_token_characters = max_token_characters
        self._token_indexers = token_indexers or {"tokens": SingleIdTokenIndexer()}
        self._tokenizer = tokenizer or WhitespaceTokenizer()
        self._max_sequence_length = max_sequence_length
        self._long_sentences = long_sentences
        self._mode = mode
        self._window_length = window_length
        self._start_token = start_token or None
        self._end_token = end_token or None
        self._index_directory = index_directory
        self._plans: Dict[Tuple[str, ...], Tuple[Tuple[int, ...], _Plan]] = {}
        self.last_read_statistics: Dict[str, int] = self._new_statistics()

    def __getstate__(self) -> Dict[str, Any]:
        # Loader workers rebuild their plans (from the indexes loaded in this process, if forked).
        state = dict(self.__dict__)
        state["_plans"] = {}
        return state

    @property
    def token_indexers(self) -> Dict[str, TokenIndexer]:
        """The indexers of the "tokens" field."""
        return self._token_indexers

    @property
    def start_token(self) -> Optional[str]:
        """The token put before every sentence (`None`: none)."""
        return self._start_token

    @property
    def end_token(self) -> Optional[str]:
        """The token put after every sentence (`None`: none)."""
        return self._end_token

    @property
    def max_token_characters(self) -> Optional[int]:
        """The length at which tokens are cut (`None`: not cut)."""
        return self._max_token_characters

    def text_to_instance(self, sentence: Union[str, List[str]]) -> Instance:  # type: ignore
        """One instance of a sentence (a string to tokenize or a list of tokens), not limited."""
        if isinstance(sentence, str):
            tokens = self._tokenizer.tokenize(sentence)
        else:
            tokens = [token if isinstance(token, Token) else Token(token) for token in sentence]
        return Instance({"tokens": TextField(self._with_boundaries(tokens))})

    def apply_token_indexers(self, instance: Instance) -> None:
        instance.fields["tokens"].token_indexers = self._token_indexers  # type: ignore

    def set_epoch(self, epoch: Optional[int]) -> None:
        """The training epoch the next reads belong to (`None`: corpus order), for `shuffle`."""
        self._epoch = epoch

    def _rank(self) -> Tuple[int, int]:
        """This process's rank and the number of processes."""
        # `get_distributed_info()` survives pickling into data-loader workers.
        if self._distributed_info is not None:
            return self._distributed_info.global_rank, self._distributed_info.world_size
        if util.is_distributed():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def _slot(self) -> Tuple[int, int]:
        """This reader's index among all readers (processes x loader workers), and their number."""
        rank, world_size = self._rank()
        worker, num_workers = 0, 1
        if self._worker_info is not None:
            worker, num_workers = self._worker_info.id, self._worker_info.num_workers
        return rank * num_workers + worker, world_size * num_workers

    def num_instances(self, file_path: Union[PathOrStr, List[PathOrStr]]) -> int:
        """The number of instances of an epoch of `file_path`, all readers together (from its index)."""
        return self._plan(file_path).num_instances

    def share_sizes(self, file_path: Union[PathOrStr, List[PathOrStr]], num_workers: int = 1) -> List[int]:
        """
        The number of instances each of this process's `num_workers` loader workers reads in an
        epoch of `file_path` (one number without workers), from the corpus index, without
        reading the corpus. A `TypeError` when it cannot be known (`max_instances`).
        """
        if self.max_instances is not None:
            raise TypeError("the share sizes are not known with max_instances")
        total = self.num_instances(file_path)
        rank, world_size = self._rank()
        num_slots = world_size * num_workers
        shares = [_share(total, rank * num_workers + worker, num_slots) for worker in range(num_workers)]
        return [end - first for first, end in shares]

    def _read(self, file_path: Union[PathOrStr, List[PathOrStr]]) -> Iterable[Instance]:
        plan = self._plan(file_path)
        statistics = self._new_statistics()
        self.last_read_statistics = statistics
        slot, num_slots = self._slot()
        first, end = _share(plan.num_instances, slot, num_slots)
        last_slot = slot == num_slots - 1
        if self._mode == "sentence":
            need = (first, end)
            own = (first, _NO_END if last_slot else end)
        else:
            length = self._window_length
            need = (first * length, min(end * length + 1, plan.total_units)) if end > first else (0, 0)
            own = (first * length, _NO_END if last_slot else end * length)
        lines = self._share_lines(plan, need, own, statistics)
        if self._mode == "sentence":
            chunks = self._sentence_chunks(lines, statistics, first, end)
        else:
            chunks = self._windows(lines, statistics, first, end, need, plan.total_units)
        for chunk in chunks:
            statistics["instances"] += 1
            yield Instance({"tokens": TextField(chunk)})
        logger.info(
            "Read %s, share %d of %d (%d of %d file(s) opened): %s",
            file_path, slot + 1, num_slots, statistics["files"], len(plan.indexes),
            ", ".join(f"{value} {key.replace('_', ' ')}" for key, value in statistics.items() if key != "files"),
        )

    def _plan(self, file_path: Any) -> "_Plan":
        """The corpus's index and what each line gives in this reader's mode (cached)."""
        paths = self._resolve_paths(file_path)
        indexes = load_indexes(paths, self._index_directory)
        key = tuple(id(index) for index in indexes)
        cached = self._plans.get(tuple(paths))
        if cached is not None and cached[0] == key:
            return cached[1]
        kinds, lengths, units = [], [], []
        any_text = False
        boundaries = (self._start_token is not None) + (self._end_token is not None)
        for index in indexes:
            line_kinds = numpy.where(index.tokens == 0, _BLANK, _TEXT).astype(numpy.uint8)
            line_kinds[index.tokens == INVALID_LINE] = _INVALID
            if self._max_line_bytes is not None:
                line_kinds[index.line_bytes() > self._max_line_bytes] = _LONG
            any_text = any_text or bool(numpy.any(line_kinds != _BLANK))
            invalid = numpy.flatnonzero(line_kinds == _INVALID)
            if len(invalid) and self._invalid_lines == "error":
                raise self._decoding_error(index, int(invalid[0]))
            line_tokens = index.tokens
            if type(self._tokenizer) is not WhitespaceTokenizer:
                line_tokens = self._tokenizer_counts(index, line_kinds)
            text = line_kinds == _TEXT
            if self._mode == "sentence":
                line_units = numpy.ones(len(line_tokens), dtype=numpy.int32)
                if self._long_sentences == "split":
                    line_units = numpy.maximum(1, -(-line_tokens // self._max_sequence_length))
            else:
                line_units = line_tokens + boundaries
            kinds.append(line_kinds)
            lengths.append(line_tokens)
            units.append(numpy.where(text, line_units, 0).astype(numpy.int32))
        if not any_text:
            shown = ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
            raise ConfigurationError(
                f"The corpus {file_path} has no text: its {len(paths)} file(s) are empty or blank ({shown})"
            )
        totals = numpy.array([int(u.sum()) for u in units], dtype=numpy.int64)
        total_units = int(totals.sum())
        if self._mode == "sentence":
            num_instances = total_units
        else:
            num_instances = -(-(total_units - 1) // self._window_length) if total_units >= 2 else 0
        plan = _Plan(indexes, kinds, lengths, units, totals, total_units, num_instances)
        self._plans[tuple(paths)] = (key, plan)
        return plan

    def _tokenizer_counts(self, index: CorpusIndex, kinds: numpy.ndarray) -> numpy.ndarray:
        """Each line's number of tokens by this reader's (not whitespace) tokenizer: one pass."""
        counts = index.tokens.copy()
        text_lines = numpy.flatnonzero(kinds == _TEXT)
        for line, raw_line in _read_lines(index, text_lines, self._new_statistics()):
            counts[line] = len(self._tokenizer.tokenize(raw_line.decode("utf-8")))
        return counts

    def _decoding_error(self, index: CorpusIndex, line: int) -> CorpusDecodingError:
        (_, raw_line), = _read_lines(index, numpy.array([line]), self._new_statistics())
        try:
            raw_line.decode("utf-8")
        except UnicodeDecodeError as error:
            return CorpusDecodingError(index.path, line + 1, error.start, error.reason)
        return CorpusDecodingError(index.path, line + 1, 0, "the corpus changed after it was indexed")

    def _file_order(self, num_files: int) -> numpy.ndarray:
        if self._shuffle and self._epoch is not None:
            return numpy.random.default_rng([self._seed % 2**64, self._epoch, 0]).permutation(num_files)
        return numpy.arange(num_files)

    def _line_order(self, file_number: int, num_lines: int) -> numpy.ndarray:
        if self._shuffle and self._epoch is not None:
            seed = [self._seed % 2**64, self._epoch, 1, file_number]
            return numpy.random.default_rng(seed).permutation(num_lines)
        return numpy.arange(num_lines)

    def _share_lines(
        self, plan: "_Plan", need: Tuple[int, int], own: Tuple[int, int], statistics: Dict[str, int]
    ) -> Iterator[Tuple[str, int, int, Optional[str], bool]]:
        """
        `(path, line number, start, text, own, tokens)` of every line this reader needs, in the epoch's
        order: the lines whose units (instances, or stream tokens in window mode) start at
        `start` and overlap `need`, and the lines it owns (whose units start in `own`; it
        counts those in its statistics). Only the files they are in are opened.
        """
        position = 0
        for file_number in self._file_order(len(plan.indexes)):
            index = plan.indexes[file_number]
            total = int(plan.totals[file_number])
            start, position = position, position + total
            touches_need = total > 0 and start < need[1] and position > need[0]
            if not touches_need and not (start <= own[1] - 1 and position >= own[0]):
                continue
            order = self._line_order(int(file_number), index.num_lines)
            units = plan.units[file_number][order]
            starts = numpy.cumsum(units, dtype=numpy.int64)
            starts -= units
            starts += start
            kinds = plan.kinds[file_number][order]
            owned = (starts >= own[0]) & (starts < own[1])
            counts = numpy.bincount(kinds[owned], minlength=4)
            statistics["lines"] += int(owned.sum())
            statistics["blank_lines_skipped"] += int(counts[_BLANK])
            for kind, key, why in (
                (_INVALID, "invalid_lines_skipped", "invalid UTF-8"),
                (_LONG, "long_lines_skipped", f"longer than {self._max_line_bytes} bytes"),
            ):
                if counts[kind]:
                    for line in order[owned & (kinds == kind)][: _MAX_SKIP_WARNINGS]:
                        statistics[key] += 1
                        why_this = self._why_skipped(index, int(line), why)
                        self._warn_skipped(statistics, index.path, int(line) + 1, why_this)
                    statistics[key] += int(counts[kind]) - min(int(counts[kind]), _MAX_SKIP_WARNINGS)
            wanted = (units > 0) & (starts < need[1]) & (starts + units > need[0])
            wanted |= owned & (kinds == _TEXT)
            if not wanted.any():
                continue
            line_numbers, line_starts, line_owned = order[wanted], starts[wanted], owned[wanted]
            del order, units, starts, kinds, owned, wanted
            lines = _read_lines(index, line_numbers, statistics)
            lengths = plan.lengths[file_number]
            for begin in range(0, len(line_numbers), 4096):  # a slice at a time: lazy
                for (line, raw_line), line_start, is_own in zip(
                    lines, line_starts[begin : begin + 4096].tolist(), line_owned[begin : begin + 4096].tolist()
                ):
                    try:
                        text = raw_line.decode("utf-8")
                    except UnicodeDecodeError as error:
                        raise CorpusDecodingError(index.path, line + 1, error.start, error.reason) from None
                    yield index.path, line + 1, line_start, text, is_own, int(lengths[line])

    def _why_skipped(self, index: CorpusIndex, line: int, why: str) -> str:
        if why != "invalid UTF-8":
            return why
        error = self._decoding_error(index, line)
        return f"invalid UTF-8 at byte offset {error.byte_offset} ({error.reason})"

    def _tokens(self, text: str, statistics: Dict[str, int], own: bool, path: str, line_number: int,
                expected: int) -> List[Token]:
        tokens = self._tokenizer.tokenize(text)
        if len(tokens) != expected:
            raise ConfigurationError(
                f"{path}, line {line_number}: {len(tokens)} tokens where its index counted {expected}: "
                "the file changed while it was read, or the index is wrong (delete it to rebuild it)"
            )
        if own:
            statistics["sentences"] += 1
            statistics["tokens"] += len(tokens)
        limit = self._max_token_characters
        if limit is None:
            return tokens
        if own:
            statistics["tokens_truncated"] += sum(len(token.text) > limit for token in tokens)
        return [Token(token.text[:limit]) if len(token.text) > limit else token for token in tokens]

    def _sentence_chunks(
        self, lines: Iterable[Tuple], statistics: Dict[str, int], first: int, end: int
    ) -> Iterator[List[Token]]:
        """Sentence mode: the chunks numbered `first` to `end - 1` of the epoch's order."""
        for path, line_number, start, text, own, expected in lines:
            tokens = self._tokens(text, statistics, own, path, line_number, expected)
            chunks = self._limit_length(tokens, statistics, own)
            for chunk in chunks[max(0, first - start) : max(0, end - start)]:
                yield self._with_boundaries(chunk)

    def _windows(
        self, lines: Iterable[Tuple], statistics: Dict[str, int], first: int, end: int,
        need: Tuple[int, int], total: int,
    ) -> Iterator[List[Token]]:
        """Window mode: the windows numbered `first` to `end - 1` of the epoch's token stream."""
        length = self._window_length
        stream: List[Token] = []
        offset = need[0]  # stream position of stream[0]
        window = first
        for path, line_number, start, text, own, expected in lines:
            tokens = self._with_boundaries(self._tokens(text, statistics, own, path, line_number, expected))
            stream.extend(tokens[max(0, offset + len(stream) - start) :])
            while window < end:
                window_end = min(window * length + length + 1, total)
                if offset + len(stream) < window_end:
                    break
                yield stream[window * length - offset : window_end - offset]
                window += 1
                del stream[: window * length - offset]
                offset = window * length

    @staticmethod
    def _warn_skipped(statistics: Dict[str, int], path: str, line_number: int, why: str) -> None:
        skipped = statistics.get("invalid_lines_skipped", 0) + statistics.get("long_lines_skipped", 0)
        if skipped <= _MAX_SKIP_WARNINGS:
            more = " (further skipped lines are only counted)" if skipped == _MAX_SKIP_WARNINGS else ""
            logger.warning("%s, line %d: skipped, %s%s", path, line_number, why, more)

    def _limit_length(
        self, tokens: List[Token], statistics: Dict[str, int], own: bool = True
    ) -> List[List[Token]]:
        max_length = self._max_sequence_length
        if len(tokens) <= max_length:
            return [tokens]
        if self._long_sentences == "truncate":
            statistics["sentences_truncated"] += own
            return [tokens[:max_length]]
        statistics["sentences_split"] += own
        return [tokens[start : start + max_length] for start in range(0, len(tokens), max_length)]

    def _with_boundaries(self, tokens: List[Token]) -> List[Token]:
        start = [Token(self._start_token)] if self._start_token is not None else []
        end = [Token(self._end_token)] if self._end_token is not None else []
        return start + list(tokens) + end

    @staticmethod
    def _resolve_paths(file_path: Any) -> List[str]:
        """The files to read, in sorted order for a directory or glob; a list in its order."""
        if isinstance(file_path, (list, tuple)):
            if not file_path:
                raise ConfigurationError("Empty list of corpus paths")
            resolve = LanguageModelCorpusReader._resolve_paths
            return [path for one_path in file_path for path in resolve(one_path)]
        if not isinstance(file_path, (str, PathLike)):
            raise ConfigurationError(f"Corpus path must be a file, directory or glob pattern, got {file_path!r}")
        if not str(file_path).strip():
            raise ConfigurationError(
                f"The corpus path is empty ({str(file_path)!r}): no file to read (an unset variable?)"
            )
        pattern = os.path.expanduser(str(file_path))
        if os.path.isfile(pattern):
            return [pattern]
        if os.path.isdir(pattern):
            names = sorted(name for name in os.listdir(pattern) if not name.startswith("."))
            paths = [os.path.join(pattern, name) for name in names]
            paths = [path for path in paths if os.path.isfile(path)]
            if not paths:
                raise ConfigurationError(f"Corpus directory {str(file_path)!r} contains no files")
            return paths
        paths = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
        if not paths:
            raise ConfigurationError(f"No corpus files found matching {str(file_path)!r}")
        return paths

    def _new_statistics(self) -> Dict[str, int]:
        statistics = dict.fromkeys(_STATISTICS, 0)
        # Only with the options that produce them.
        if self._invalid_lines == "skip":
            statistics["invalid_lines_skipped"] = 0
        if self._max_line_bytes is not None:
            statistics["long_lines_skipped"] = 0
        if self._max_token_characters is not None:
            statistics["tokens_truncated"] = 0
        return statistics
