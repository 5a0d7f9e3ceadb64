import logging
import math
import pickle
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.data.data_loaders import MultiProcessDataLoader
from allennlp.data.dataset_readers import DatasetReader
from allennlp.data.dataset_readers.dataset_reader import DistributedInfo, WorkerInfo

from elmoc_allennlp.data.dataset_readers.corpus_index import load_indexes
from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import (
    CorpusDecodingError,
    LanguageModelCorpusReader,
)

LM_CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "lm_corpus"


def _texts(instances) -> List[List[str]]:
    return [[token.text for token in instance["tokens"].tokens] for instance in instances]


def _fixture_sentences(*names: str) -> List[List[str]]:
    sentences = []
    for name in names:
        for line in (LM_CORPUS / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                sentences.append(["<S>"] + line.split() + ["</S>"])
    return sentences


TRAIN_SHARDS = ("train-00001-of-00002.txt", "train-00002-of-00002.txt")


def test_reads_the_shards_by_glob_in_order(caplog):
    reader = LanguageModelCorpusReader()
    with caplog.at_level(logging.INFO, logger=LanguageModelCorpusReader.__module__):
        instances = list(reader.read(str(LM_CORPUS / "train-*")))

    assert _texts(instances) == _fixture_sentences(*TRAIN_SHARDS)
    assert len(instances) == 20 + 15
    assert _texts(instances)[0][:3] == ["<S>", "the", "company"]
    assert list(instances[0].fields) == ["tokens"]
    assert instances[0]["tokens"].token_indexers.keys() == {"tokens"}
    assert reader.last_read_statistics == {
        "files": 2,
        "lines": 36,
        "blank_lines_skipped": 1,
        "sentences": 35,
        "sentences_split": 0,
        "sentences_truncated": 0,
        "tokens": sum(len(s) - 2 for s in _fixture_sentences(*TRAIN_SHARDS)),
        "instances": 35,
        "bytes": sum((LM_CORPUS / name).stat().st_size for name in TRAIN_SHARDS),
    }
    # One summary line per read.
    summaries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Read ")]
    assert len(summaries) == 1
    assert "train-*" in summaries[0] and "1 blank lines skipped" in summaries[0]
    assert "35 instances" in summaries[0]


def test_reads_a_directory_and_a_single_file(tmp_path):
    reader = LanguageModelCorpusReader()
    instances = list(reader.read(LM_CORPUS))
    assert _texts(instances) == _fixture_sentences(*TRAIN_SHARDS, "valid.txt")
    assert reader.last_read_statistics["files"] == 3
    assert reader.last_read_statistics["instances"] == 39

    assert _texts(reader.read(LM_CORPUS / "valid.txt")) == _fixture_sentences("valid.txt")
    assert reader.last_read_statistics["files"] == 1

    # Hidden files and subdirectories of a directory are ignored.
    (tmp_path / "b.txt").write_text("second file\n")
    (tmp_path / "a.txt").write_text("first file\n")
    (tmp_path / ".hidden").write_text("not read\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("not read either\n")
    assert _texts(reader.read(tmp_path)) == [
        ["<S>", "first", "file", "</S>"],
        ["<S>", "second", "file", "</S>"],
    ]


def test_missing_inputs_name_the_path(tmp_path):
    reader = LanguageModelCorpusReader()
    pattern = str(tmp_path / "shards" / "news.en-*")
    with pytest.raises(ConfigurationError, match="No corpus files found matching .*news.en-"):
        list(reader.read(pattern))
    with pytest.raises(ConfigurationError, match="no-such-file.txt"):
        list(reader.read(tmp_path / "no-such-file.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="empty' contains no files"):
        list(reader.read(tmp_path / "empty"))
    # What an unset shell variable gives: the empty path (alone, in a list, or blank).
    for path in ("", "  ", [""], [str(LM_CORPUS / "valid.txt"), ""]):
        with pytest.raises(ConfigurationError, match="The corpus path is empty"):
            list(reader.read(path))
    # ... or a path with the variable missing from its front.
    with pytest.raises(ConfigurationError, match="'/valid-missing.txt'"):
        list(reader.read("/valid-missing.txt"))
    assert reader.share_sizes(str(LM_CORPUS / "valid.txt")) == [4]
    with pytest.raises(ConfigurationError, match="The corpus path is empty"):
        reader.share_sizes("")


def test_invalid_utf8_names_file_line_and_offset(tmp_path):
    corpus = tmp_path / "broken-shard.txt"
    corpus.write_bytes(b"first line\nsecond line\nbad \xff\xfe bytes\nfourth line\n")
    reader = LanguageModelCorpusReader()
    instances = reader.read(corpus)
    # The index finds the bad line: the read fails before its first instance, on every reader.
    with pytest.raises(ConfigurationError) as excinfo:
        next(instances)
    message = str(excinfo.value)
    assert "broken-shard.txt" in message
    assert "line 3" in message
    assert "byte offset 4" in message
    assert isinstance(excinfo.value, CorpusDecodingError)
    assert (excinfo.value.line_number, excinfo.value.byte_offset) == (3, 4)
    # It survives the trip from a data-loader worker process.
    assert str(pickle.loads(pickle.dumps(excinfo.value))) == message


def test_blank_lines_control_characters_and_line_endings(tmp_path):
    corpus = tmp_path / "odd.txt"
    corpus.write_bytes(
        b"\xef\xbb\xbfone two\r\n"  # byte order mark, CRLF
        b"   \t \n"
        b"\n"
        b"\xc2\xa0\xe3\x80\x80\n"  # no-break space, ideographic space
        b"a\x00b c\x1fd\te\n"  # NUL stays inside a token; the unit separator is whitespace
        b"last line without newline"
    )
    reader = LanguageModelCorpusReader(start_token=None, end_token="")
    assert _texts(reader.read(corpus)) == [
        ["one", "two"],
        ["a\x00b", "c", "d", "e"],
        ["last", "line", "without", "newline"],
    ]
    statistics = reader.last_read_statistics
    assert (statistics["lines"], statistics["blank_lines_skipped"], statistics["sentences"]) == (
        6,
        3,
        3,
    )


@pytest.fixture
def long_line_corpus(tmp_path) -> Tuple[Path, List[str]]:
    words = [f"w{i}" for i in range(10_000)]
    corpus = tmp_path / "long.txt"
    corpus.write_text("short one\n" + " ".join(words) + "\n" + " ".join(words[:50]) + "\n")
    return corpus, words


def test_long_sentences_are_split(long_line_corpus):
    corpus, words = long_line_corpus
    reader = LanguageModelCorpusReader(max_sequence_length=50)
    texts = _texts(reader.read(corpus))
    assert len(texts) == 1 + 200 + 1
    chunks = texts[1:201]
    assert all(len(chunk) == 52 and chunk[0] == "<S>" and chunk[-1] == "</S>" for chunk in chunks)
    assert [word for chunk in chunks for word in chunk[1:-1]] == words
    assert texts[-1][1:-1] == words[:50]  # exactly max_sequence_length: untouched
    statistics = reader.last_read_statistics
    assert (statistics["sentences"], statistics["sentences_split"]) == (3, 1)
    assert (statistics["sentences_truncated"], statistics["instances"]) == (0, 202)


def test_long_sentences_are_truncated(long_line_corpus):
    corpus, words = long_line_corpus
    reader = LanguageModelCorpusReader(max_sequence_length=50, long_sentences="truncate")
    texts = _texts(reader.read(corpus))
    assert len(texts) == 3
    assert texts[1] == ["<S>"] + words[:50] + ["</S>"]
    statistics = reader.last_read_statistics
    assert (statistics["sentences_split"], statistics["sentences_truncated"]) == (0, 1)


def test_split_chunks_are_uneven_at_the_end(tmp_path):
    corpus = tmp_path / "seven.txt"
    corpus.write_text("1 2 3 4 5 6 7\n")
    reader = LanguageModelCorpusReader(max_sequence_length=3, start_token=None, end_token=None)
    assert _texts(reader.read(corpus)) == [["1", "2", "3"], ["4", "5", "6"], ["7"]]


def test_is_lazy(tmp_path):
    corpus = tmp_path / "big.txt"
    line = b"the quick brown fox jumps over the lazy dog " * 4 + b"\n"
    with open(corpus, "wb") as corpus_file:
        corpus_file.write(line * 40_000)  # ~7 MB
    size = corpus.stat().st_size

    reader = LanguageModelCorpusReader()
    load_indexes([str(corpus)])  # what a data loader's length does before the first read
    tracemalloc.start()
    try:
        instances = reader.read(corpus)
        first = next(instances)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _texts([first]) == [["<S>"] + line.decode().split() + ["</S>"]]
    # Arrays of a few bytes per line and a block of lines (256 KB), not the corpus.
    assert peak < 48 * 40_000 + (1 << 20) < size // 2
    # Read in blocks of about 256 KB.
    assert reader.last_read_statistics["bytes"] <= (1 << 18) + len(line)
    with open(corpus, "ab") as corpus_file:
        corpus_file.write(b"an invalid last line \xff\n")
    # The changed file is indexed again, and the bad last line found before the first instance.
    with pytest.raises(CorpusDecodingError, match="line 40001"):
        next(reader.read(corpus))


def _sharding_corpus(tmp_path) -> Path:
    """Three shards of unique sentences, with blank lines and sentences to split."""
    directory = tmp_path / "shards"
    directory.mkdir()
    number = 0
    for shard in range(3):
        lines = []
        for i in range(17 + 4 * shard):
            if i % 7 == 3:
                lines.append("")
            else:
                length = 12 if i % 5 == 0 else 3
                lines.append(" ".join(f"s{number}t{k}" for k in range(length)))
                number += 1
        (directory / f"news.en-{shard:05d}").write_text("\n".join(lines) + "\n")
    return directory


def _read_as(
    reader: LanguageModelCorpusReader,
    path: Path,
    worker: Optional[WorkerInfo] = None,
    distributed: Optional[DistributedInfo] = None,
) -> List[Tuple[str, ...]]:
    reader._set_worker_info(worker)
    reader._set_distributed_info(distributed)
    return [tuple(text) for text in _texts(reader.read(path))]


def _shares(reader, corpus, world_size: int, num_workers: int) -> List[List[Tuple[str, ...]]]:
    """What each (rank, worker) reads, and the summed share statistics in `reader.summed`."""
    shares, summed = [], Counter()
    for rank in range(world_size):
        for worker_id in range(num_workers):
            shares.append(
                _read_as(
                    reader,
                    corpus,
                    worker=WorkerInfo(num_workers, worker_id) if num_workers > 1 else None,
                    distributed=DistributedInfo(world_size, rank) if world_size > 1 else None,
                )
            )
            summed.update(reader.last_read_statistics)
    reader.summed = summed
    return shares


# Counted over what a reader opens and reads, not over the lines it owns.
_READ = {"files", "bytes"}


@pytest.mark.parametrize("mode", ["sentence", "window"])
@pytest.mark.parametrize(
    "world_size, num_workers", [(1, 3), (2, 1), (2, 3), (4, 2), (3, 1)], ids=str
)
def test_readers_get_every_instance_once_and_equal_counts(tmp_path, mode, world_size, num_workers):
    corpus = _sharding_corpus(tmp_path) / "news.en-*"
    options = (
        dict(mode="window", window_length=4) if mode == "window" else dict(max_sequence_length=5)
    )
    reader = LanguageModelCorpusReader(**options)
    everything = _read_as(reader, corpus)
    total_statistics = dict(reader.last_read_statistics)
    if mode == "sentence":
        assert total_statistics["sentences_split"] > 0
    assert total_statistics["blank_lines_skipped"] > 0

    shares = _shares(reader, corpus, world_size, num_workers)
    # The single reader's instances cut into R x W contiguous shares, in (rank, worker) order
    # (windows included: they are the single-process windows, not windows of each share) ...
    assert [instance for share in shares for instance in share] == everything
    # ... of equal sizes (within one): the ranks end their epoch together.
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    for key in total_statistics.keys() - _READ:
        assert reader.summed[key] == total_statistics[key], key
    # Each reader reads about its share of the bytes, not the corpus.
    slots = world_size * num_workers
    assert reader.summed["bytes"] < 1.5 * total_statistics["bytes"] + 200 * slots
    # The loader's count of each worker's instances, from the index alone.
    for rank in range(world_size):
        reader._set_distributed_info(DistributedInfo(world_size, rank) if world_size > 1 else None)
        sizes = reader.share_sizes(corpus, num_workers)
        assert sizes == [
            len(share) for share in shares[rank * num_workers : (rank + 1) * num_workers]
        ]


def test_max_instances_counts_instances_not_lines(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\na b\n\nc d\ne f g h\ni\nj\n")
    reader = LanguageModelCorpusReader(max_instances=4, max_sequence_length=2)
    assert _texts(reader.read(corpus)) == [
        ["<S>", "a", "b", "</S>"],
        ["<S>", "c", "d", "</S>"],
        ["<S>", "e", "f", "</S>"],
        ["<S>", "g", "h", "</S>"],
    ]


def test_multiprocess_data_loader_sees_every_sentence_once(tmp_path):
    corpus = _sharding_corpus(tmp_path)
    reader = LanguageModelCorpusReader(max_sequence_length=5)
    expected = Counter(_read_as(reader, corpus))

    loader = MultiProcessDataLoader(reader, str(corpus), batch_size=1_000, num_workers=2)
    loaded = [tuple(text) for text in _texts(loader.iter_instances())]
    assert Counter(loaded) == expected


def test_text_to_instance():
    reader = LanguageModelCorpusReader()
    instance = reader.text_to_instance("the  bank\tsaid ")
    assert _texts([instance]) == [["<S>", "the", "bank", "said", "</S>"]]
    assert _texts([reader.text_to_instance(["a", "b"])]) == [["<S>", "a", "b", "</S>"]]
    reader.apply_token_indexers(instance)
    vocab = Vocabulary.from_instances([instance])
    instance.index_fields(vocab)
    token_ids = instance.as_tensor_dict()["tokens"]["tokens"]["tokens"].tolist()
    tokens = [vocab.get_token_from_index(i) for i in token_ids]
    assert tokens == ["<S>", "the", "bank", "said", "</S>"]

    bare = LanguageModelCorpusReader(start_token="", end_token=None)
    assert _texts([bare.text_to_instance("x y")]) == [["x", "y"]]
    only_end = LanguageModelCorpusReader(start_token=None)
    assert _texts([only_end.text_to_instance("x y")]) == [["x", "y", "</S>"]]


def test_from_params():
    reader = DatasetReader.from_params(
        Params(
            {
                "type": "elmoc_lm_corpus",
                "max_sequence_length": 4,
                "long_sentences": "truncate",
                "start_token": "<bos>",
                "token_indexers": {"chars": {"type": "characters", "min_padding_length": 1}},
            }
        )
    )
    assert isinstance(reader, LanguageModelCorpusReader)
    assert _texts([reader.text_to_instance("a b")]) == [["<bos>", "a", "b", "</S>"]]
    instance = next(iter(reader.read(LM_CORPUS / "valid.txt")))
    assert _texts([instance]) == [["<bos>", "the", "company", "said", "sales", "</S>"]]
    assert instance["tokens"].token_indexers.keys() == {"chars"}


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"long_sentences": "drop"}, "long_sentences"),
        ({"max_sequence_length": 0}, "max_sequence_length"),
        ({"max_sequence_length": 2.5}, "max_sequence_length"),
        ({"mode": "windows"}, "mode"),
        ({"mode": "window", "window_length": 0}, "window_length"),
        ({"mode": "window", "window_length": True}, "window_length"),
        ({"mode": "window", "max_sequence_length": 20}, "max_sequence_length applies to mode"),
    ],
)
def test_bad_configuration(kwargs, key):
    with pytest.raises(ConfigurationError, match=key):
        LanguageModelCorpusReader(**kwargs)


# ------------------------------------------------------------------------------- window mode


def _stream(sentences: List[List[str]]) -> List[str]:
    return [token for sentence in sentences for token in sentence]


def _unwindow(windows: List[List[str]]) -> List[str]:
    """The stream the windows were cut from (each window starts with the previous one's end)."""
    stream = list(windows[0])
    for previous, window in zip(windows, windows[1:]):
        assert window[0] == previous[-1]
        stream.extend(window[1:])
    return stream


@pytest.mark.parametrize("window_length", [1, 4, 20, 1000])
def test_windows_run_across_sentence_boundaries(window_length):
    reader = LanguageModelCorpusReader(mode="window", window_length=window_length)
    windows = _texts(reader.read(str(LM_CORPUS / "train-*")))
    stream = _stream(_fixture_sentences(*TRAIN_SHARDS))
    assert _unwindow(windows) == stream
    assert all(len(window) == window_length + 1 for window in windows[:-1])
    assert 2 <= len(windows[-1]) <= window_length + 1
    # Each LM predicts window_length tokens per window: every stream token but the first is a
    # forward target once, every token but the last a backward target once.
    forward_targets = [token for window in windows for token in window[1:]]
    backward_targets = [token for window in windows for token in window[:-1]]
    assert forward_targets == stream[1:] and backward_targets == stream[:-1]
    if window_length == 20:
        # Boundary markers inside windows: a window spans the end of one sentence and the start
        # of the next.
        assert any(window.index("</S>") < len(window) - 1 for window in windows if "</S>" in window)
    statistics = reader.last_read_statistics
    assert statistics["instances"] == len(windows) == math.ceil((len(stream) - 1) / window_length)
    assert statistics["sentences"] == 35 and statistics["sentences_split"] == 0


def test_windows_without_boundary_tokens_and_from_params():
    reader = DatasetReader.from_params(
        Params(
            {
                "type": "elmoc_lm_corpus",
                "mode": "window",
                "window_length": 3,
                "start_token": None,
                "end_token": None,
            }
        )
    )
    corpus = LM_CORPUS / "valid.txt"
    words = corpus.read_text().split()
    windows = _texts(reader.read(corpus))
    assert windows[0] == words[:4] and windows[1] == words[3:7]
    assert _unwindow(windows) == words
    assert windows[0][0] == "the" and "<S>" not in _stream(windows)


def test_window_mode_is_lazy(tmp_path):
    corpus = tmp_path / "big.txt"
    line = b"the quick brown fox jumps over the lazy dog\n"
    with open(corpus, "wb") as corpus_file:
        corpus_file.write(line * 100_000)  # ~4.4 MB
    reader = LanguageModelCorpusReader(mode="window", window_length=20)
    load_indexes([str(corpus)])
    tracemalloc.start()
    try:
        instances = reader.read(corpus)
        first = next(instances)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    sentence = ["<S>"] + line.decode().split() + ["</S>"]
    assert _texts([first]) == [(sentence * 2)[:21]]
    # (All its windows' tokens would take over 20 times the file's size.)
    assert peak < 48 * 100_000 + (1 << 20)
    assert reader.last_read_statistics["bytes"] <= (1 << 18) + len(line)


def _many_shards(tmp_path, num_files: int) -> Path:
    """`num_files` shards of unique sentences of varied lengths, some blank lines."""
    directory = tmp_path / f"many{num_files}"
    directory.mkdir()
    number = 0
    for shard in range(num_files):
        lines = []
        for i in range(5 + (shard * 3) % 7):
            if i % 4 == 2:
                lines.append("  ")
            else:
                lines.append(" ".join(f"s{number}t{k}" for k in range(2 + (number * 5) % 9)))
                number += 1
        (directory / f"part-{shard:03d}.txt").write_text("\n".join(lines) + "\n")
    return directory


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_multiprocess_loader_yields_the_single_process_windows(tmp_path, shuffle):
    corpus = _many_shards(tmp_path, 6)
    reader = LanguageModelCorpusReader(mode="window", window_length=4, shuffle=shuffle)
    reader.set_epoch(3)  # carried into the worker processes
    expected = Counter(map(tuple, _texts(reader.read(corpus))))
    loader = MultiProcessDataLoader(reader, str(corpus), batch_size=1_000, num_workers=2)
    assert Counter(map(tuple, _texts(loader.iter_instances()))) == expected


@pytest.mark.parametrize("mode", ["sentence", "window"])
def test_shuffle_draws_a_new_order_each_epoch_the_same_on_every_rank(tmp_path, mode):
    corpus = _many_shards(tmp_path, 5)
    options = dict(mode="window", window_length=4) if mode == "window" else {}
    reader = LanguageModelCorpusReader(shuffle=True, seed=7, **options)
    sentences = LanguageModelCorpusReader(shuffle=True, seed=7)
    in_order = _read_as(sentences, corpus)  # no epoch set: corpus order (validation)
    assert in_order == _read_as(LanguageModelCorpusReader(), corpus)
    orders = {}
    for epoch in (0, 1, 2):
        sentences.set_epoch(epoch)
        order = _read_as(sentences, corpus)
        assert Counter(order) == Counter(in_order)  # every sentence once per epoch
        orders[epoch] = order
        reader.set_epoch(epoch)
        everything = _read_as(reader, corpus)
        # Files and the sentences within them move; every process draws the same order and
        # reads its own contiguous share of it.
        shares = _shares(reader, corpus, 2, 2)
        assert [instance for share in shares for instance in share] == everything
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert len({tuple(order) for order in orders.values()}) == 3
    assert orders[0] != in_order
    again = LanguageModelCorpusReader(shuffle=True, seed=7)
    again.set_epoch(1)
    assert _read_as(again, corpus) == orders[1]  # a recovered run redraws the same order
    other_seed = LanguageModelCorpusReader(shuffle=True, seed=8)
    other_seed.set_epoch(1)
    assert _read_as(other_seed, corpus) != orders[1]


def test_a_worker_with_only_blank_files_does_not_call_the_corpus_empty(tmp_path):
    directory = tmp_path / "corpus"
    directory.mkdir()
    (directory / "a.txt").write_text("\n  \n")
    (directory / "b.txt").write_text("one sentence\n")
    reader = LanguageModelCorpusReader()
    assert _read_as(reader, directory, worker=WorkerInfo(2, 0)) == []
    assert reader.last_read_statistics["files"] == 0  # a blank file is never opened
    assert _read_as(reader, directory, worker=WorkerInfo(2, 1)) == [
        ("<S>", "one", "sentence", "</S>")
    ]
    (directory / "b.txt").write_text("\n")
    with pytest.raises(ConfigurationError, match="has no text"):
        _read_as(reader, directory, worker=WorkerInfo(2, 0))


@pytest.mark.parametrize("mode", ["sentence", "window"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_line_of_a_large_file_is_read_exactly_once(tmp_path, mode, shuffle):
    # 20,000 numbered lines: past the reader's slices of 4,096 lines (one line was lost at the end
    # of each: 19,996 instances, lines 4096, 8193, ... missing).
    corpus = tmp_path / "numbered.txt"
    corpus.write_text("".join(f"{number}\n" for number in range(20_000)))
    options = (
        dict(mode="window", window_length=7, start_token=None, end_token=None)
        if mode == "window"
        else {}
    )
    reader = LanguageModelCorpusReader(shuffle=shuffle, **options)
    reader.set_epoch(2)
    texts = _texts(reader.read(corpus))
    if mode == "window":
        numbers = _unwindow(texts)
    else:
        numbers = [token for text in texts for token in text if token not in ("<S>", "</S>")]
    assert sorted(map(int, numbers)) == list(range(20_000))
    assert len(texts) == reader.num_instances(corpus)
