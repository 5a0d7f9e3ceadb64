"""
A lazy, shardable reader for One Billion Word-style language-modelling corpora: tokenized text,
one sentence per line, spread over many shard files.
"""
import glob
import logging
import os
import random
from os import PathLike
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar, Union

import torch.distributed as dist

from allennlp.common import util
from allennlp.common.checks import ConfigurationError
from allennlp.data.dataset_readers.dataset_reader import DatasetReader, PathOrStr
from allennlp.data.fields import TextField
from allennlp.data.instance import Instance
from allennlp.data.token_indexers import SingleIdTokenIndexer, TokenIndexer
from allennlp.data.tokenizers import Token, Tokenizer, WhitespaceTokenizer

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

_MODES = ("sentence", "window")
_LONG_SENTENCE_MODES = ("split", "truncate")
_DEFAULT_MAX_SEQUENCE_LENGTH = 200
_INVALID_LINE_MODES = ("error", "skip")
# Skipped lines named individually in the log, per read.
_MAX_SKIP_WARNINGS = 10
# Chunk size for discarding the rest of an over-long line.
_DISCARD_CHUNK = 1 << 20


class CorpusDecodingError(ConfigurationError):
    """
    Raised when a line of a corpus file is not valid UTF-8. The message names the file, the
    1-based line number and the byte offset of the first bad byte within the line.
    """

    def __init__(self, path: str, line_number: int, byte_offset: int, reason: str) -> None:
        super().__init__(
            f"{path}, line {line_number}: invalid UTF-8 at byte offset {byte_offset} "
            f"of the line ({reason})"
        )
        self.path = path
        self.line_number = line_number
        self.byte_offset = byte_offset
        self.reason = reason

    def __reduce__(self):
        # Keeps the exception picklable (it may be raised in a data-loader worker process).
        return type(self), (self.path, self.line_number, self.byte_offset, self.reason)


@DatasetReader.register("elmoc_lm_corpus")
class LanguageModelCorpusReader(DatasetReader):
    """
    Reads a tokenized corpus with one sentence per line (e.g. the One Billion Word benchmark) for
    biLM pretraining, as instances with a single `TextField` "tokens", in one of two modes:

    * `mode="sentence"`: each sentence is an instance, `[start_token] + tokens + [end_token]`.
      Sentences longer than `max_sequence_length` tokens are split into consecutive chunks or
      truncated.
    * `mode="window"`: the sentences, each wrapped in its boundary tokens, are concatenated into
      one token stream, which is cut into fixed-length windows that run across sentence
      boundaries, as the ELMo-C authors train (Li et al. 2019, section 5.2.2: 20-token inputs;
      their `config.json` `bptt` 20, `source/data.py` `get_batch_parallel` in GitHub
      uclanlp/ELMO-C). Window `i` holds stream tokens `i * L ... i * L + L` (`L =
      window_length`, `L + 1` tokens: consecutive windows share one token), so that every
      token of the stream is the target of the forward LM in exactly one window and of the
      backward LM in exactly one window, and each LM predicts `L` tokens per window. The last
      window of the corpus may be shorter. The stream never holds more than one window and one
      sentence in memory.

    `file_path` may be a file, a directory (all its non-hidden files) or a glob pattern such as
    `"shards/news.en-*"`; files are read in sorted order (unless `shuffle`), lazily, line by line.
    Lines are decoded as strict UTF-8 (an invalid line raises a `CorpusDecodingError`, a `ConfigurationError` naming
    the file, line and byte offset). Blank and whitespace-only lines are skipped.

    With several data-loader workers and/or distributed processes, the instances are dealt out
    in turn: of the `R * W` readers (`R` processes x `W` loader workers), reader `r * W + w`
    yields instances `r * W + w`, `+ R * W`, ... of what one reader would yield (sentences or
    chunks; windows of the whole stream, so that they are the single-process windows). So every
    instance is read once per epoch, and the processes' counts differ by at most one: they end
    their epoch together and allennlp, which ends it when the first process runs out, drops no
    data (`docs/scale_and_fault_tolerance.md`). Every reader scans every file (reading and
    decoding its bytes, counting the tokens of each line), and tokenizes only the lines its own
    instances need.

    With `shuffle`, each training epoch reads the files, and the sentences within each file, in
    a new order drawn from `(seed, epoch)` (as the authors' `data.py` reshuffles files and
    sentences at every pass), the same in every process and every recovered run. The
    `elmoc_gradient_descent` trainer sets the epoch (`set_epoch`); a read with no epoch (e.g.
    validation) is in corpus order. A shuffled file is held in memory while it is read. The
    loader must read the corpus every epoch (`max_instances_in_memory` set, as in the configs):
    one that keeps all instances reads it once.

    The counts of the most recent read (of this worker's share) are in `last_read_statistics`:
    `files`, `lines`, `blank_lines_skipped`, `sentences`, `sentences_split`, `sentences_truncated`,
    `tokens` (without boundaries), `instances` (sentences, chunks or windows) and `bytes` (bytes
    of the files read, whole lines, whether kept or not), plus `invalid_lines_skipped`,
    `long_lines_skipped` and `tokens_truncated` when the options that produce them are set. One
    summary line per file is logged at INFO.

    Bad input at scale: with `invalid_lines="skip"` a line that is not UTF-8 is skipped, counted
    and logged (file and line) instead of stopping the run; `max_line_bytes` bounds the memory a
    line may take (a binary file without newlines is skipped line by line, never read whole);
    `max_token_characters` truncates pathological tokens, whose character n-grams would
    otherwise make the `elmoc_fasttext_subwords` indexer's padded batch enormous. A corpus
    whose files are all empty or blank raises a `ConfigurationError` naming it.

    Registered as a `DatasetReader` with name "elmoc_lm_corpus".

    # Parameters

    token_indexers : `Dict[str, TokenIndexer]`, optional
        Indexers for the "tokens" field. Defaults to `{"tokens": SingleIdTokenIndexer()}`.
    tokenizer : `Tokenizer`, optional (default = `WhitespaceTokenizer()`)
        Splits a line into tokens. The corpus is assumed to be tokenized already.
    mode : `str`, optional (default = `"sentence"`)
        `"sentence"` (one instance per sentence) or `"window"` (fixed-length windows across
        sentence boundaries), see above.
    window_length : `int`, optional (default = `20`)
        Window mode: the number of tokens each LM predicts per window (the authors' `bptt`);
        an instance holds `window_length + 1` tokens, boundary tokens included.
    max_sequence_length : `int`, optional (default = `200` in sentence mode)
        Sentence mode: the maximum number of tokens of an instance, not counting the boundary
        tokens. Not allowed in window mode.
    long_sentences : `str`, optional (default = `"split"`)
        Sentence mode: what to do with longer sentences: `"split"` them into consecutive chunks
        of at most `max_sequence_length` tokens (each chunk gets its own boundary tokens), or
        `"truncate"` them to the first `max_sequence_length` tokens.
    start_token : `str`, optional (default = `"<S>"`)
        Prepended to every instance; `None` or `""` to add nothing.
    end_token : `str`, optional (default = `"</S>"`)
        Appended to every instance; `None` or `""` to add nothing.
    invalid_lines : `str`, optional (default = `"error"`)
        What to do with a line that is not valid UTF-8: `"error"` raises a `CorpusDecodingError`
        naming the file, line and byte offset; `"skip"` skips it (counted in
        `invalid_lines_skipped`; the first ones are logged with their file and line).
    max_line_bytes : `int`, optional (default = `None`)
        Lines longer than this many bytes are skipped (counted in `long_lines_skipped`, logged
        with their file and line) without being held in memory whole. `None`: no limit.
    max_token_characters : `int`, optional (default = `None`)
        Tokens longer than this many characters are truncated to it (counted in
        `tokens_truncated`). ELMo caps tokens at 50 characters. `None`: no limit.
    shuffle : `bool`, optional (default = `False`)
        Read each epoch in a new order drawn from `(seed, epoch)`, see above.
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
        start_token: Optional[str] = "<S>",
        end_token: Optional[str] = "</S>",
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
        if mode not in _MODES:
            raise ConfigurationError(f"mode must be one of {list(_MODES)}, got {mode!r}")
        if mode == "window" and max_sequence_length is not None:
            raise ConfigurationError(
                "max_sequence_length applies to mode 'sentence'; in mode 'window' every instance "
                "has window_length + 1 tokens"
            )
        if max_sequence_length is None:
            max_sequence_length = _DEFAULT_MAX_SEQUENCE_LENGTH
        for name, length in (
            ("max_sequence_length", max_sequence_length),
            ("window_length", window_length),
        ):
            if isinstance(length, bool) or not isinstance(length, int):
                raise ConfigurationError(f"{name} must be an integer, got {length!r}")
            if length < 1:
                raise ConfigurationError(f"{name} must be at least 1, got {length}")
        if long_sentences not in _LONG_SENTENCE_MODES:
            raise ConfigurationError(
                f"long_sentences must be one of {list(_LONG_SENTENCE_MODES)}, "
                f"got {long_sentences!r}"
            )
        if invalid_lines not in _INVALID_LINE_MODES:
            raise ConfigurationError(
                f"invalid_lines must be one of {list(_INVALID_LINE_MODES)}, got {invalid_lines!r}"
            )
        for name, limit in (
            ("max_line_bytes", max_line_bytes),
            ("max_token_characters", max_token_characters),
        ):
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
            ):
                raise ConfigurationError(f"{name} must be a positive integer or null, got {limit!r}")
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

    def text_to_instance(self, sentence: Union[str, List[str]]) -> Instance:  # type: ignore
        """
        Builds one instance from a sentence (a string, tokenized with the reader's tokenizer, or a
        list of tokens). No length limit is applied here. The token indexers are attached by
        `apply_token_indexers()` (which `read()` and predictors call).
        """
        if isinstance(sentence, str):
            tokens = self._tokenizer.tokenize(sentence)
        else:
            tokens = [token if isinstance(token, Token) else Token(token) for token in sentence]
        return self._tokens_to_instance(tokens)

    def apply_token_indexers(self, instance: Instance) -> None:
        instance.fields["tokens"].token_indexers = self._token_indexers  # type: ignore

    def set_epoch(self, epoch: Optional[int]) -> None:
        """The training epoch the next reads belong to (`None`: corpus order), for `shuffle`."""
        self._epoch = epoch

    def _slot(self) -> Tuple[int, int]:
        """This reader's index among all readers (processes x loader workers), and their number."""
        # `get_distributed_info()` survives pickling into data-loader worker processes, where
        # `torch.distributed` is not initialized.
        if self._distributed_info is not None:
            rank, world_size = self._distributed_info.global_rank, self._distributed_info.world_size
        elif util.is_distributed():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        else:
            rank, world_size = 0, 1
        worker, num_workers = (
            (self._worker_info.id, self._worker_info.num_workers)
            if self._worker_info is not None
            else (0, 1)
        )
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
                self._warn_skipped(
                    statistics, path, line_number, f"longer than {self._max_line_bytes} bytes"
                )
                continue
            try:
                text = self._decode(raw_line, path, line_number)
            except CorpusDecodingError as error:
                if self._invalid_lines == "error":
                    raise
                statistics["invalid_lines_skipped"] += 1
                self._warn_skipped(
                    statistics,
                    path,
                    line_number,
                    f"invalid UTF-8 at byte offset {error.byte_offset} ({error.reason})",
                )
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
        if self._max_token_characters is not None:
            tokens = self._truncate_tokens(tokens, statistics if own else dict(statistics))
        return tokens

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
        """
        Window mode: the sentences with their boundary tokens as one stream, cut into windows of
        `window_length + 1` tokens, each starting at the last token of the previous one; this
        reader's are every `num_slots`-th. The lines no own window needs are only counted.
        """
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

    def _truncate_tokens(self, tokens: List[Token], statistics: Dict[str, int]) -> List[Token]:
        limit = self._max_token_characters
        result = []
        for token in tokens:
            if len(token.text) > limit:  # type: ignore[arg-type]
                statistics["tokens_truncated"] += 1
                token = Token(token.text[:limit])  # type: ignore[index]
            result.append(token)
        return result

    @staticmethod
    def _warn_skipped(statistics: Dict[str, int], path: str, line_number: int, why: str) -> None:
        skipped = statistics.get("invalid_lines_skipped", 0) + statistics.get(
            "long_lines_skipped", 0
        )
        if skipped <= _MAX_SKIP_WARNINGS:
            logger.warning(
                "%s, line %d: skipped, %s%s",
                path,
                line_number,
                why,
                " (further skipped lines are only counted)"
                if skipped == _MAX_SKIP_WARNINGS
                else "",
            )

    def _numbered_lines(
        self,
        paths: List[str],
        statistics: Dict[str, int],
        corpus_lines: List[int],
        order: Optional[random.Random] = None,
    ) -> Iterator[Tuple[str, int, Optional[bytes]]]:
        """
        Yields `(path, 1-based line number, raw line without its newline)` for every line of
        every file, streaming, and logs a summary of each file. The raw line is `None` for a
        line longer than `max_line_bytes` (which is not kept in memory). This generator is only
        resumed after the consumer has dealt with the previous line, so the counts are complete
        when a file ends. `corpus_lines[0]` is set to 1 at the first line of any file (of any
        worker's share) that is not blank. With `order`, each file's lines are read whole and
        yielded in an order drawn from it.
        """
        for path in paths:
            statistics["files"] += 1
            before = dict(statistics)
            lines = self._file_lines(path, statistics, corpus_lines)
            if order is not None:
                lines = list(lines)  # type: ignore[assignment]
                order.shuffle(lines)  # type: ignore[arg-type]
            yield from lines
            in_file = {key: statistics[key] - before[key] for key in statistics}
            logger.info(
                "Read %s: %d lines, %d blank lines skipped, %d sentences (%d split, %d truncated), "
                "%d instances%s",
                path,
                in_file["lines"],
                in_file["blank_lines_skipped"],
                in_file["sentences"],
                in_file["sentences_split"],
                in_file["sentences_truncated"],
                in_file["instances"],
                "".join(
                    f", {in_file[key]} {key.replace('_', ' ')}"
                    for key in ("invalid_lines_skipped", "long_lines_skipped", "tokens_truncated")
                    if in_file.get(key)
                ),
            )

    def _file_lines(
        self, path: str, statistics: Dict[str, int], corpus_lines: List[int]
    ) -> Iterator[Tuple[str, int, Optional[bytes]]]:
        """The numbered lines of one file, streaming (see `_numbered_lines`)."""
        limit = self._max_line_bytes
        with open(path, "rb") as corpus_file:
            line_number = 0
            while True:
                if limit is None:
                    raw_line = corpus_file.readline()
                else:
                    # One byte more than the limit, plus room for "\r\n".
                    raw_line = corpus_file.readline(limit + 3)
                if not raw_line:
                    break
                statistics["bytes"] += len(raw_line)
                line_number += 1
                if line_number == 1 and raw_line.startswith(b"\xef\xbb\xbf"):
                    raw_line = raw_line[3:]  # UTF-8 byte order mark
                if not corpus_lines[0] and raw_line.strip():
                    corpus_lines[0] = 1
                if limit is not None and len(raw_line.rstrip(b"\r\n")) > limit:
                    if not raw_line.endswith(b"\n"):
                        statistics["bytes"] += self._discard_rest_of_line(corpus_file)
                    corpus_lines[0] = 1
                    yield path, line_number, None
                    continue
                yield path, line_number, raw_line.rstrip(b"\r\n")

    @staticmethod
    def _discard_rest_of_line(corpus_file) -> int:
        """Reads past the rest of the current line; returns the number of bytes skipped."""
        skipped = 0
        while True:
            chunk = corpus_file.readline(_DISCARD_CHUNK)
            skipped += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                return skipped

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
        with_boundaries = list(tokens)
        if self._start_token is not None:
            with_boundaries.insert(0, Token(self._start_token))
        if self._end_token is not None:
            with_boundaries.append(Token(self._end_token))
        return with_boundaries

    def _tokens_to_instance(self, tokens: List[Token]) -> Instance:
        return Instance({"tokens": TextField(self._with_boundaries(tokens))})

    @staticmethod
    def _decode(raw_line: bytes, path: str, line_number: int) -> str:
        try:
            return raw_line.decode("utf-8", errors="strict")
        except UnicodeDecodeError as error:
            raise CorpusDecodingError(path, line_number, error.start, error.reason) from None

    @staticmethod
    def _resolve_paths(file_path: Any) -> List[str]:
        """
        The files to read: `file_path` itself, the non-hidden files of a directory, or the files
        matching a glob pattern, in sorted order. A list of such inputs is read in the given order.
        """
        if isinstance(file_path, (list, tuple)):
            if not file_path:
                raise ConfigurationError("Empty list of corpus paths")
            paths: List[str] = []
            for one_path in file_path:
                paths.extend(LanguageModelCorpusReader._resolve_paths(one_path))
            return paths
        if not isinstance(file_path, (str, PathLike)):
            raise ConfigurationError(
                f"Corpus path must be a file, a directory or a glob pattern, got {file_path!r}"
            )

        pattern = os.path.expanduser(str(file_path))
        if os.path.isfile(pattern):
            return [pattern]
        if os.path.isdir(pattern):
            paths = sorted(
                os.path.join(pattern, name)
                for name in os.listdir(pattern)
                if not name.startswith(".") and os.path.isfile(os.path.join(pattern, name))
            )
            if not paths:
                raise ConfigurationError(f"Corpus directory {file_path} contains no files")
            return paths
        paths = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
        if not paths:
            raise ConfigurationError(f"No corpus files found matching {file_path}")
        return paths

    def _new_statistics(self) -> Dict[str, int]:
        statistics = {
            "files": 0,
            "lines": 0,
            "blank_lines_skipped": 0,
            "sentences": 0,
            "sentences_split": 0,
            "sentences_truncated": 0,
            "tokens": 0,
            "instances": 0,
            "bytes": 0,
        }
        # Only with the options that produce them, so the default statistics are unchanged.
        if self._invalid_lines == "skip":
            statistics["invalid_lines_skipped"] = 0
        if self._max_line_bytes is not None:
            statistics["long_lines_skipped"] = 0
        if self._max_token_characters is not None:
            statistics["tokens_truncated"] = 0
        return statistics
