"""A lazy, shardable reader of tokenized language-modelling corpora, one sentence per line."""

import logging
from typing import Dict, Iterator, List, Optional, Tuple, Union

from allennlp.common.checks import ConfigurationError
from allennlp.data.dataset_readers.dataset_reader import DatasetReader, PathOrStr
from allennlp.data.fields import TextField
from allennlp.data.instance import Instance
from allennlp.data.token_indexers import SingleIdTokenIndexer, TokenIndexer
from allennlp.data.tokenizers import Token, Tokenizer, WhitespaceTokenizer

from elmoc_allennlp.common.checks import check_one_of, check_positive_int
from elmoc_allennlp.data.dataset_readers.corpus_shares import (  # noqa: F401 (CorpusDecodingError: its old place)
    CorpusDecodingError,
    CorpusShare,
    CorpusShares,
    ReaderSlot,
    ReadStatistics,
    ShareLine,
    ShareSettings,
    process_rank,
)

logger = logging.getLogger(__name__)

# The boundary tokens a sentence gets by default (ELMo's; the fastText indexer's defaults too).
DEFAULT_START_TOKEN, DEFAULT_END_TOKEN = "<S>", "</S>"


@DatasetReader.register("elmoc_lm_corpus")
class LanguageModelCorpusReader(DatasetReader):
    """
    Reads a tokenized corpus (a file, directory, glob or list), one sentence per line, into "tokens"
    instances: sentences with boundary tokens (mode `"sentence"`) or windows of `window_length + 1`
    tokens of the sentence stream (mode `"window"`, Li et al. 2019, section 5.2.2). Each reader reads
    its contiguous share of the epoch (`corpus_shares.py`; docs/scale_and_fault_tolerance.md).

    Registered as a `DatasetReader` with name "elmoc_lm_corpus".

    # Parameters

    token_indexers : `Dict[str, TokenIndexer]`, optional
        Indexers for the "tokens" field. Defaults to `{"tokens": SingleIdTokenIndexer()}`.
    tokenizer : `Tokenizer`, optional (default = `WhitespaceTokenizer()`)
        Splits a line into tokens. The corpus is tokenized already (one sentence per line, tokens
        separated by spaces), hence whitespace by default.
    max_sequence_length : `int`, optional (default = `200` in sentence mode)
        Sentence mode: the maximum number of tokens of an instance, without boundary tokens.
    long_sentences : `str`, optional (default = `"split"`)
        Sentence mode: `"split"` longer sentences into chunks, or `"truncate"` them.
    mode : `str`, optional (default = `"sentence"`)
        `"sentence"`: one sentence per instance, with its boundary tokens, as ELMo-C embeds text
        downstream; `"window"`: `window_length + 1` tokens of the sentence stream, across sentence
        boundaries, as the paper pretrains (section 5.2.2).
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
        The seed of the per-epoch order (with `shuffle`): the same on every worker and after
        `--recover`, so that the workers' shares and a resumed epoch read what they would have.
    index_directory : `str`, optional (default = allennlp's cache directory + `elmoc_corpus_index`)
        Where a file's corpus index goes when the file's folder is read-only (else: beside it, hidden).
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
        max_sequence_length = 200 if max_sequence_length is None else max_sequence_length
        check_positive_int(max_sequence_length, "max_sequence_length")
        check_positive_int(window_length, "window_length")
        check_one_of(long_sentences, ("split", "truncate"), "long_sentences")
        check_one_of(invalid_lines, ("error", "skip"), "invalid_lines")
        check_positive_int(max_line_bytes, "max_line_bytes", allow_none=True)
        check_positive_int(max_token_characters, "max_token_characters", allow_none=True)
        self._token_indexers = token_indexers or {"tokens": SingleIdTokenIndexer()}
        self._tokenizer = tokenizer or WhitespaceTokenizer()
        self._start_token = start_token or None
        self._end_token = end_token or None
        self._epoch: Optional[int] = None
        boundary_tokens = (self._start_token is not None) + (self._end_token is not None)
        self._settings = ShareSettings(
            mode,
            max_sequence_length,
            long_sentences,
            window_length,
            boundary_tokens,
            self._tokenizer,
            invalid_lines,
            max_line_bytes,
            max_token_characters,
            shuffle,
            seed,
            index_directory,
        )
        self._shares = CorpusShares(self._settings)
        self._statistics = ReadStatistics(self._settings)

    @property
    def last_read_statistics(self) -> Dict[str, int]:
        """The counts of the last read (of this reader's share), so far: see `ReadStatistics`."""
        return self._statistics.as_dict()

    @property
    def token_indexers(self) -> Dict[str, TokenIndexer]:
        """The indexers of the "tokens" field."""
        return self._token_indexers

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

    def _slot(self) -> ReaderSlot:
        """This reader's place among all readers (processes x loader workers)."""
        rank, world_size = process_rank(self._distributed_info)
        if self._worker_info is None:
            return ReaderSlot(rank, world_size)
        return ReaderSlot(rank, world_size, self._worker_info.id, self._worker_info.num_workers)

    def num_instances(self, file_path: Union[PathOrStr, List[PathOrStr]]) -> int:
        """The number of instances of an epoch of `file_path`, all readers together (from its index)."""
        return self._shares.plan(file_path).num_instances

    def share_sizes(
        self, file_path: Union[PathOrStr, List[PathOrStr]], num_workers: int = 1
    ) -> List[int]:
        """The instances of each of this process's `num_workers` loader workers in an epoch (from the index)."""
        if self.max_instances is not None:
            raise TypeError("the share sizes are not known with max_instances")
        return self._shares.share_sizes(
            file_path, *process_rank(self._distributed_info), num_workers
        )

    def _read(self, file_path: Union[PathOrStr, List[PathOrStr]]) -> Iterator[Instance]:
        share = self._shares.share(file_path, self._slot(), self._epoch)
        statistics = self._statistics = share.statistics
        numbered = (
            self._sentences(share) if self._settings.mode == "sentence" else self._windows(share)
        )
        expected = share.first
        for number, tokens in numbered:
            if number != expected or number >= share.end:
                raise share.lost_instances(expected, number)
            expected += 1
            statistics.instances += 1
            yield Instance({"tokens": TextField(tokens)})
        if expected != share.end:
            raise share.lost_instances(expected, None)
        logger.info(
            "Read %s, share %d of %d (%d of %d file(s) opened): %s",
            file_path,
            share.slot.index + 1,
            share.slot.count,
            statistics.files,
            len(share.plan.indexes),
            ", ".join(
                f"{value} {key.replace('_', ' ')}"
                for key, value in statistics.as_dict().items()
                if key != "files"
            ),
        )

    def _tokens(self, line: ShareLine, statistics: ReadStatistics) -> List[Token]:
        """The line's tokens (checked against the index, counted if the share owns the line)."""
        tokens = self._tokenizer.tokenize(line.text)
        if len(tokens) != line.tokens:
            raise ConfigurationError(
                f"{line.path}, line {line.line_number}: {len(tokens)} tokens where its index counted "
                f"{line.tokens}: the file changed while it was read, or the index is wrong "
                "(delete it to rebuild it)"
            )
        limit = self._settings.max_token_characters
        if line.own:
            statistics.sentences += 1
            statistics.tokens += len(tokens)
            if limit is not None:
                statistics.tokens_truncated += sum(len(token.text) > limit for token in tokens)
        if limit is None:
            return tokens
        return [Token(token.text[:limit]) if len(token.text) > limit else token for token in tokens]

    def _sentences(self, share: CorpusShare) -> Iterator[Tuple[int, List[Token]]]:
        """Sentence mode: `(number, instance tokens)` of the share's chunks of sentences, in order."""
        first, end, statistics = share.first, share.end, share.statistics
        max_length = self._settings.max_sequence_length
        for line in share.lines():
            tokens = self._tokens(line, statistics)
            chunks = [tokens]
            if len(tokens) > max_length:
                if self._settings.long_sentences == "truncate":
                    statistics.sentences_truncated += line.own
                    chunks = [tokens[:max_length]]
                else:
                    statistics.sentences_split += line.own
                    chunks = [
                        tokens[start : start + max_length]
                        for start in range(0, len(tokens), max_length)
                    ]
            for chunk in range(
                max(0, first - line.start), min(len(chunks), max(0, end - line.start))
            ):
                yield line.start + chunk, self._with_boundaries(chunks[chunk])

    def _windows(self, share: CorpusShare) -> Iterator[Tuple[int, List[Token]]]:
        """Window mode: `(number, window)` of the share's windows of the epoch's token stream."""
        length, total, end = self._settings.window_length, share.plan.total_units, share.end
        stream: List[Token] = []
        offset = share.need[0]  # stream position of stream[0]
        window = share.first
        for line in share.lines():
            tokens = self._with_boundaries(self._tokens(line, share.statistics))
            stream.extend(tokens[max(0, offset + len(stream) - line.start) :])
            while window < end:
                window_end = min(window * length + length + 1, total)
                if offset + len(stream) < window_end:
                    break
                yield window, stream[window * length - offset : window_end - offset]
                window += 1
                del stream[: window * length - offset]
                offset = window * length

    def _with_boundaries(self, tokens: List[Token]) -> List[Token]:
        start = [Token(self._start_token)] if self._start_token is not None else []
        end = [Token(self._end_token)] if self._end_token is not None else []
        return start + list(tokens) + end
