"""A lazy, shardable reader of tokenized language-modelling corpora, one sentence per line."""
import glob
import logging
import os
import random
from os import PathLike
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import torch.distributed as dist

from allennlp.common import util
from allennlp.common.checks import ConfigurationError
from allennlp.data.dataset_readers.dataset_reader import DatasetReader, PathOrStr
from allennlp.data.fields import TextField
from allennlp.data.instance import Instance
from allennlp.data.token_indexers import SingleIdTokenIndexer, TokenIndexer
from allennlp.data.tokenizers import Token, Tokenizer, WhitespaceTokenizer

from elmoc_allennlp.common.checks import check_one_of
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


def _check_positive_int(value: Any, key: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{key} must be a positive integer, got {value!r}")


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
    section 5.2.2). `file_path` is a file, a directory, a glob pattern or a list of them.
    The `R * W` readers of `R` processes of `W` loader workers deal the instances in turn, so each
    is read once per epoch (`docs/scale_and_fault_tolerance.md`). With `shuffle`, each epoch set by
    `set_epoch` is read in an order drawn from `(seed, epoch)`. The counts of the last read are
    in `last_read_statistics`.

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
        _check_positive_int(max_sequence_length, "max_sequence_length")
        _check_positive_int(window_length, "window_length")
        check_one_of(long_sentences, ("split", "truncate"), "long_sentences")
        check_one_of(invalid_lines, ("error", "skip"), "invalid_lines")
        _check_positive_int(max_line_bytes, "max_line_bytes", allow_none=True)
        _check_positive_int(max_token_characters, "max_token_characters", allow_none=True)
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
        self.last_read_statistics: Dict[str, int] = self._new_statistics()

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

    def _slot(self) -> Tuple[int, int]:
        """This reader's index among all readers (processes x loader workers), and their number."""
        # `get_distributed_info()` survives pickling into data-loader workers.
        if self._distributed_info is not None:
            rank, world_size = self._distributed_info.global_rank, self._distributed_info.world_size
        elif util.is_distributed():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        else:
            rank, world_size = 0, 1
        worker, num_workers = 0, 1
        if self._worker_info is not None:
            worker, num_workers = self._worker_info.id, self._worker_info.num_workers
        return rank * num_workers + worker, world_size * num_workers

    def _read(self, file_path: Union[PathOrStr, List[PathOrStr]]) -> Iterable[Instance]:
        paths = self._resolve_paths(file_path)
        order = None
        if self._shuffle and self._epoch is not None:
            order = random.Random(self._seed * 1_000_003 + self._epoch)
            order.shuffle(paths)
        statistics = self._new_statistics()
        self.last_read_statistics = statistics
        corpus_lines = [0]  # set to 1 at the first non-blank line
        lines = self._numbered_lines(paths, statistics, corpus_lines, order)
        texts = self._texts(lines, statistics)
        make = self._windows if self._mode == "window" else self._sentence_chunks
        for chunk in make(texts, statistics, *self._slot()):
            statistics["instances"] += 1
            yield Instance({"tokens": TextField(chunk)})
        if corpus_lines[0] == 0:
            raise ConfigurationError(
                f"The corpus {file_path} has no text: its {len(paths)} file(s) are empty "
                f"or blank ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})"
            )

    def _texts(
        self, numbered_lines: Iterator[Tuple[str, int, Optional[bytes]]], statistics: Dict[str, int]
    ) -> Iterator[str]:
        """The text of every sentence (valid, non-blank line), in order."""
        for path, line_number, raw_line in numbered_lines:
            statistics["lines"] += 1
            if raw_line is None:
                statistics["long_lines_skipped"] += 1
                self._warn_skipped(statistics, path, line_number, f"longer than {self._max_line_bytes} bytes")
                continue
            try:
                text = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                if self._invalid_lines == "error":
                    raise CorpusDecodingError(path, line_number, error.start, error.reason) from None
                statistics["invalid_lines_skipped"] += 1
                why = f"invalid UTF-8 at byte offset {error.start} ({error.reason})"
                self._warn_skipped(statistics, path, line_number, why)
                continue
            if not text or text.isspace():
                statistics["blank_lines_skipped"] += 1
                continue
            yield text

    def _tokens(self, text: str, statistics: Dict[str, int], own: bool) -> List[Token]:
        tokens = self._tokenizer.tokenize(text)
        if own:
            statistics["sentences"] += 1
            statistics["tokens"] += len(tokens)
        limit = self._max_token_characters
        if limit is None:
            return tokens
        if own:
            statistics["tokens_truncated"] += sum(len(token.text) > limit for token in tokens)
        return [Token(token.text[:limit]) if len(token.text) > limit else token for token in tokens]

    def _num_tokens(self, text: str) -> int:
        # Whitespace tokenization without building the tokens (what most lines need).
        if type(self._tokenizer) is WhitespaceTokenizer:
            return len(text.split())
        return len(self._tokenizer.tokenize(text))

    def _sentence_chunks(
        self, texts: Iterable[str], statistics: Dict[str, int], slot: int, num_slots: int
    ) -> Iterator[List[Token]]:
        """Sentence mode: this reader's chunks, every `num_slots`-th of all sentences' chunks."""
        index = 0  # of the next chunk, among all readers'
        max_length = self._max_sequence_length
        for text in texts:
            length = self._num_tokens(text)
            num_chunks = 1
            if length > max_length and self._long_sentences == "split":
                num_chunks = -(-length // max_length)
            first_own = (slot - index) % num_slots
            if first_own < num_chunks:
                own = first_own == 0
                tokens = self._tokens(text, statistics, own)
                for chunk_index, chunk in enumerate(self._limit_length(tokens, statistics, own)):
                    if (index + chunk_index) % num_slots == slot:
                        yield self._with_boundaries(chunk)
            index += num_chunks

    def _windows(
        self, texts: Iterable[str], statistics: Dict[str, int], slot: int, num_slots: int
    ) -> Iterator[List[Token]]:
        """Window mode: this reader's windows; the lines none of them needs are only counted."""
        length = self._window_length
        size = length + 1
        boundaries = (self._start_token is not None) + (self._end_token is not None)
        stream: List[Optional[Token]] = []
        offset = 0  # stream position of stream[0]
        window = 0  # the next window starts at position window * length
        for text in texts:
            first = offset + len(stream)
            last = first + self._num_tokens(text) + boundaries - 1
            low, high = max(0, -((length - first) // length)), last // length  # windows touched
            own = (first // length) % num_slots == slot
            if own or high - low + 1 >= num_slots or (slot - low) % num_slots <= high - low:
                stream.extend(self._with_boundaries(self._tokens(text, statistics, own)))
            else:
                stream.extend([None] * (last - first + 1))
            while offset + len(stream) - window * length >= size:
                if window % num_slots == slot:
                    start = window * length - offset
                    yield stream[start : start + size]  # type: ignore[misc]
                window += 1
            del stream[: window * length - offset]
            offset = window * length
        if len(stream) > 1 and window % num_slots == slot:
            yield stream  # type: ignore[misc]

    @staticmethod
    def _warn_skipped(statistics: Dict[str, int], path: str, line_number: int, why: str) -> None:
        skipped = statistics.get("invalid_lines_skipped", 0) + statistics.get("long_lines_skipped", 0)
        if skipped <= _MAX_SKIP_WARNINGS:
            more = " (further skipped lines are only counted)" if skipped == _MAX_SKIP_WARNINGS else ""
            logger.warning("%s, line %d: skipped, %s%s", path, line_number, why, more)

    def _numbered_lines(
        self, paths: List[str], statistics: Dict[str, int], corpus_lines: List[int], order: Optional[random.Random]
    ) -> Iterator[Tuple[str, int, Optional[bytes]]]:
        """`(path, line number, raw line or None if too long)` of every line; logs each file's counts."""
        for path in paths:
            statistics["files"] += 1
            before = dict(statistics)
            lines = self._file_lines(path, statistics, corpus_lines)
            if order is not None:
                lines = list(lines)  # type: ignore[assignment]
                order.shuffle(lines)  # type: ignore[arg-type]
            yield from lines
            counts = ", ".join(
                f"{statistics[key] - before[key]} {key.replace('_', ' ')}"
                for key in statistics
                if key not in ("files", "bytes")
            )
            logger.info("Read %s: %s", path, counts)

    def _file_lines(
        self, path: str, statistics: Dict[str, int], corpus_lines: List[int]
    ) -> Iterator[Tuple[str, int, Optional[bytes]]]:
        """The numbered lines of one file, streaming (see `_numbered_lines`)."""
        limit = self._max_line_bytes
        with open(path, "rb") as corpus_file:
            line_number = 0
            while True:
                # With a limit: one byte more than it, plus room for "\r\n".
                raw_line = corpus_file.readline(-1 if limit is None else limit + 3)
                if not raw_line:
                    break
                statistics["bytes"] += len(raw_line)
                line_number += 1
                if line_number == 1 and raw_line.startswith(b"\xef\xbb\xbf"):
                    raw_line = raw_line[3:]  # UTF-8 byte order mark
                if not corpus_lines[0] and raw_line.strip():
                    corpus_lines[0] = 1
                if limit is not None and len(raw_line.rstrip(b"\r\n")) > limit:
                    # Discard the rest of the line, a chunk at a time.
                    while raw_line and not raw_line.endswith(b"\n"):
                        raw_line = corpus_file.readline(1 << 20)
                        statistics["bytes"] += len(raw_line)
                    corpus_lines[0] = 1
                    yield path, line_number, None
                    continue
                yield path, line_number, raw_line.rstrip(b"\r\n")

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
        pattern = os.path.expanduser(str(file_path))
        if os.path.isfile(pattern):
            return [pattern]
        if os.path.isdir(pattern):
            names = sorted(name for name in os.listdir(pattern) if not name.startswith("."))
            paths = [os.path.join(pattern, name) for name in names]
            paths = [path for path in paths if os.path.isfile(path)]
            if not paths:
                raise ConfigurationError(f"Corpus directory {file_path} contains no files")
            return paths
        paths = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
        if not paths:
            raise ConfigurationError(f"No corpus files found matching {file_path}")
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
