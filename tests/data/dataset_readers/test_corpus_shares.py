"""
Which lines each reader reads (`corpus_shares.py`), against a plain reference: every file read
whole with `open().read()`, every non-blank line once. At the sizes where the module's constants
bite (k*B - 1, k*B, k*B + 1 for k = 1, 2): the slices of 4,096 lines the reader once had (and
lost a line at the end of each), the blocks of `_BLOCK_BYTES`, the reads merged across
`_MAX_GAP_BYTES`, the `_MAX_SKIP_WARNINGS` warnings; in sentence and window mode, 1 process and
R ranks x W workers, one file and many uneven shards, shuffled or not; and 1,000,000 lines. And
the guard: a line or instance lost or repeated raises, naming the file and line.
"""

import logging
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple
from unittest import mock

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allennlp.data.dataset_readers.dataset_reader import DistributedInfo, WorkerInfo

from elmoc_allennlp.data.dataset_readers import corpus_index, corpus_shares
from elmoc_allennlp.data.dataset_readers.corpus_shares import EpochLengthError, ReaderSlot
from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import LanguageModelCorpusReader

Sentence = Tuple[str, ...]


def _write_shards(
    directory: Path, shard_lines: Sequence[int], line_bytes: int = 0, blank_every: int = 0
) -> Path:
    """
    Shards of numbered lines ("L<number> ..." padded to `line_bytes` with the line break, if
    given), a blank line every `blank_every` lines; the shards' folder.
    """
    directory.mkdir(parents=True, exist_ok=True)
    number = 0
    for shard, num_lines in enumerate(shard_lines):
        lines = []
        for i in range(num_lines):
            if blank_every and i % blank_every == blank_every - 1:
                lines.append(" " * max(0, line_bytes - 1))
                continue
            text = f"L{number} w{number % 7}" + " x" * (number % 3)
            lines.append(text.ljust(line_bytes - 1, "y") if line_bytes else text)
            number += 1
        (directory / f"part-{shard:03d}.txt").write_bytes(
            "".join(f"{line}\n" for line in lines).encode()
        )
    return directory


def _plain_sentences(corpus: Path) -> List[Sentence]:
    """The reference: every file read plainly, each non-blank line a sentence with its boundaries."""
    paths = sorted(corpus.iterdir()) if corpus.is_dir() else [corpus]
    sentences = []
    for path in paths:
        if path.name.startswith("."):
            continue
        for raw_line in path.read_bytes().split(b"\n"):
            tokens = raw_line.decode("utf-8").split()
            if tokens:
                sentences.append(("<S>", *tokens, "</S>"))
    return sentences


def _texts(instances) -> List[Sentence]:
    return [tuple(token.text for token in instance["tokens"].tokens) for instance in instances]


def _read_shares(
    reader, corpus, world_size: int, num_workers: int
) -> Tuple[List[List[Sentence]], Counter]:
    """What each (rank, worker) reads, and the statistics of all of them, summed."""
    shares, statistics = [], Counter()
    for rank in range(world_size):
        for worker in range(num_workers):
            reader._set_worker_info(WorkerInfo(num_workers, worker) if num_workers > 1 else None)
            reader._set_distributed_info(
                DistributedInfo(world_size, rank) if world_size > 1 else None
            )
            shares.append(_texts(reader.read(corpus)))
            statistics.update(reader.last_read_statistics)
        reader._set_worker_info(None)
        assert reader.share_sizes(corpus, num_workers) == [
            len(share) for share in shares[-num_workers:]
        ]
    reader._set_distributed_info(None)
    return shares, statistics


def _unwindow(windows: List[Sentence]) -> List[str]:
    stream = list(windows[0]) if windows else []
    for previous, window in zip(windows, windows[1:]):
        assert window[0] == previous[-1]
        stream.extend(window[1:])
    return stream


def _sentences_of_stream(stream: List[str]) -> List[Sentence]:
    sentences, current = [], []
    for token in stream:
        current.append(token)
        if token == "</S>":
            sentences.append(tuple(current))
            current = []
    assert not current
    return sentences


def check_every_line_once(
    corpus: Path,
    mode: str,
    shuffle: bool,
    world_size: int = 1,
    num_workers: int = 1,
    epoch: int = 1,
) -> Counter:
    """The R x W shares read every non-blank line of the reference once; their statistics, summed."""
    reference = _plain_sentences(corpus)
    options = (
        dict(mode="window", window_length=5)
        if mode == "window"
        else dict(max_sequence_length=10_000)
    )
    reader = LanguageModelCorpusReader(shuffle=shuffle, **options)
    reader.set_epoch(epoch)
    shares, statistics = _read_shares(reader, corpus, world_size, num_workers)
    everything = [instance for share in shares for instance in share]
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert len(everything) == reader.num_instances(corpus)
    sentences = everything if mode == "sentence" else _sentences_of_stream(_unwindow(everything))
    if shuffle:
        assert Counter(sentences) == Counter(reference)
        assert len(set(sentences)) == len(sentences)  # (the lines are numbered: all different)
    else:
        assert sentences == reference
    assert statistics["lines"] == sum(
        path.read_bytes().count(b"\n") for path in Path(corpus).glob("*.txt")
    )
    return statistics


# The slices of 4,096 lines (which lost the line after each): one file of k*B - 1, k*B, k*B + 1 lines.
@pytest.mark.parametrize("num_lines", [4095, 4096, 4097, 8191, 8192, 8193])
@pytest.mark.parametrize("mode, shuffle", [("sentence", False), ("window", True)])
def test_slices_of_lines_one_file(tmp_path, num_lines, mode, shuffle):
    corpus = _write_shards(tmp_path / "corpus", [num_lines])
    check_every_line_once(corpus, mode, shuffle)


# Shares of about k*B lines each: 2 ranks x 2 workers over uneven shards with blank lines.
@pytest.mark.parametrize(
    "lines_per_share, mode, shuffle", [(4096, "sentence", False), (8193, "window", True)]
)
def test_slices_of_lines_ranks_and_workers_many_shards(tmp_path, lines_per_share, mode, shuffle):
    total = 4 * lines_per_share
    corpus = _write_shards(
        tmp_path / "corpus", [total // 2, 3, total // 3, total - total // 2 - total // 3 - 3]
    )
    check_every_line_once(corpus, mode, shuffle, world_size=2, num_workers=2)


# The blocks of _BLOCK_BYTES: lines of 64 bytes but the first (64 + d), so that the lines ending
# the first and second block end at k*B + d bytes.
@pytest.mark.parametrize("d", [-1, 0, 1])
@pytest.mark.parametrize("mode, shuffle", [("sentence", False), ("window", True)])
def test_blocks_of_bytes(tmp_path, d, mode, shuffle):
    block = corpus_index._BLOCK_BYTES
    assert block == 1 << 18
    corpus = tmp_path / "corpus"
    _write_shards(corpus, [2 * block // 64 + 1], line_bytes=64)
    path = corpus / "part-000.txt"
    data = path.read_bytes()
    path.write_bytes(data[:10] + b"z" * (1 + d) + data[11:])  # the first line: 64 + d bytes
    statistics = check_every_line_once(corpus, mode, shuffle)
    if not shuffle:
        assert statistics["bytes"] == len(data) + d  # every byte read once


@pytest.mark.parametrize("gap", [63, 64, 65, 127, 128, 129])
def test_reads_merged_across_small_gaps(tmp_path, gap):
    assert corpus_index._MAX_GAP_BYTES == 64
    corpus = tmp_path / "gaps.txt"
    # Two sentences around a blank line of `gap` bytes (which no reader reads).
    corpus.write_bytes(b"a b\n" + b" " * (gap - 1) + b"\n" + b"c\n")
    reader = LanguageModelCorpusReader()
    assert _texts(reader.read(corpus)) == [("<S>", "a", "b", "</S>"), ("<S>", "c", "</S>")]
    # Within 64 bytes, one read with the gap's bytes; beyond, two reads without them.
    assert reader.last_read_statistics["bytes"] == 4 + 2 + (gap if gap <= 64 else 0)


@pytest.mark.parametrize("num_invalid", [9, 10, 11, 19, 20, 21])
def test_skipped_lines_named_up_to_the_budget(tmp_path, caplog, num_invalid):
    assert corpus_shares._MAX_SKIP_WARNINGS == 10
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(b"".join(b"good %d\nbad \xff %d\n" % (i, i) for i in range(num_invalid)))
    reader = LanguageModelCorpusReader(invalid_lines="skip")
    with caplog.at_level(logging.WARNING):
        texts = _texts(reader.read(corpus))
    assert texts == [("<S>", "good", str(i), "</S>") for i in range(num_invalid)]
    assert reader.last_read_statistics["invalid_lines_skipped"] == num_invalid
    warnings = [
        record.getMessage()
        for record in caplog.records
        if "skipped, invalid UTF-8" in record.getMessage()
    ]
    assert [warning.split(":")[0] for warning in warnings] == [
        f"{corpus}, line {2 * i + 2}" for i in range(10)
    ][:num_invalid]
    assert ("further skipped lines are only counted" in warnings[-1]) == (num_invalid >= 10)


@contextmanager
def _small_constants(block_bytes: int, gap_bytes: int) -> Iterator[None]:
    with mock.patch.object(corpus_index, "_BLOCK_BYTES", block_bytes), mock.patch.object(
        corpus_index, "_MAX_GAP_BYTES", gap_bytes
    ):
        yield


@settings(max_examples=30, derandomize=True, deadline=None)
@given(
    shards=st.lists(st.integers(0, 23), min_size=1, max_size=6),
    blank_every=st.sampled_from([0, 3, 5]),
    world_size=st.integers(1, 3),
    num_workers=st.integers(1, 3),
    mode=st.sampled_from(["sentence", "window"]),
    shuffle=st.booleans(),
    constants=st.tuples(st.integers(8, 90), st.integers(0, 20)),
)
def test_every_line_once_at_small_constants(
    shards, blank_every, world_size, num_workers, mode, shuffle, constants
):
    if not any(count - count // blank_every if blank_every else count for count in shards):
        shards = shards + [1]
    with tempfile.TemporaryDirectory() as directory, _small_constants(*constants):
        corpus = _write_shards(Path(directory) / "corpus", shards, blank_every=blank_every)
        check_every_line_once(corpus, mode, shuffle, world_size, num_workers, epoch=len(shards))


# --- The guard: an epoch that loses or repeats a line or an instance raises, naming it. ---


_READ_LINES = corpus_shares.read_lines


def _lossy(drop: Optional[int] = None, repeat: Optional[int] = None):
    """`read_lines`, but dropping or repeating the line at position `drop` / `repeat` of a file's lines."""
    read_lines = _READ_LINES

    def lossy_read_lines(index, line_numbers, statistics=None):
        for position, (line, raw_line) in enumerate(read_lines(index, line_numbers, statistics)):
            if position != drop:
                yield line, raw_line
            if position == repeat:
                yield line, raw_line

    return lossy_read_lines


@pytest.mark.parametrize("mode", ["sentence", "window"])
def test_a_lost_line_raises_naming_the_file_and_line(tmp_path, monkeypatch, mode):
    corpus = _write_shards(tmp_path / "corpus", [30, 40])
    reader = LanguageModelCorpusReader(mode=mode)
    expected = _texts(reader.read(corpus))
    monkeypatch.setattr(corpus_shares, "read_lines", _lossy(drop=12))
    with pytest.raises(
        EpochLengthError, match=r"part-000\.txt, line 13: lost by share 1 of 1 .*gave line 14"
    ):
        list(reader.read(corpus))
    # The last line of a file: the source ends early.
    monkeypatch.setattr(corpus_shares, "read_lines", _lossy(drop=39))
    with pytest.raises(EpochLengthError, match=r"part-001\.txt, line 40: lost .*gave no line"):
        list(reader.read(corpus))
    monkeypatch.setattr(corpus_shares, "read_lines", _lossy(repeat=39))
    with pytest.raises(
        EpochLengthError,
        match=r"part-001\.txt, line 40: read by share 1 of 1 .* after the 40 lines",
    ):
        list(reader.read(corpus))
    monkeypatch.undo()
    assert _texts(reader.read(corpus)) == expected


def test_a_lost_line_under_ddp_names_the_rank(tmp_path, monkeypatch):
    corpus = _write_shards(tmp_path / "corpus", [50])
    reader = LanguageModelCorpusReader(shuffle=True)
    reader.set_epoch(4)
    reader._set_distributed_info(DistributedInfo(2, 1))
    reader._set_worker_info(WorkerInfo(2, 1))
    monkeypatch.setattr(corpus_shares, "read_lines", _lossy(drop=3))
    with pytest.raises(
        EpochLengthError, match=r"lost by share 4 of 4 \(rank 1 of 2, loader worker 1 of 2\)"
    ):
        list(reader.read(corpus))


@pytest.mark.parametrize("mode", ["sentence", "window"])
def test_an_instance_lost_after_its_lines_raises_naming_the_share_counts_and_line(
    tmp_path, monkeypatch, mode
):
    corpus = _write_shards(tmp_path / "corpus", [30, 40])
    options = dict(mode="window", window_length=3) if mode == "window" else {}
    reader = LanguageModelCorpusReader(**options)
    reader._set_distributed_info(DistributedInfo(2, 1))
    share = reader._shares.share(corpus, ReaderSlot(1, 2), None)
    numbered = getattr(LanguageModelCorpusReader, f"_{mode}s")
    # An instance of the share goes missing, or its last one.
    for skipped in (share.first + 3, share.end - 1):

        def losing(self, share, skipped=skipped):
            return (
                (number, tokens) for number, tokens in numbered(self, share) if number != skipped
            )

        monkeypatch.setattr(LanguageModelCorpusReader, f"_{mode}s", losing)
        with pytest.raises(EpochLengthError) as error:
            list(reader.read(corpus))
        message = str(error.value)
        assert "share 2 of 2 (rank 1 of 2, loader worker 0 of 1)" in message
        counts = f"(of instances {share.first} to {share.end - 1}, {share.end - share.first} by its index"
        assert f"lost instance {skipped} {counts}" in message
        path, line = share.locate(skipped)
        assert f"it comes from {path}, line {line}" in message
    if mode == "sentence":
        assert share.locate(40) == (str(corpus / "part-001.txt"), 11)


def test_a_million_lines_each_read_once_by_2_ranks_of_2_workers(tmp_path):
    # 1,000,000 numbered lines in 3 uneven files: the lines of the shares of 2 ranks x 2 workers
    # (what their readers turn into instances) are every line once, owned once, read as written.
    corpus = tmp_path / "million"
    corpus.mkdir()
    bounds = [0, 123_457, 800_000, 1_000_000]
    for number, (low, high) in enumerate(zip(bounds, bounds[1:])):
        (corpus / f"part-{number}.txt").write_text("\n".join(map(str, range(low, high))) + "\n")
    reader = LanguageModelCorpusReader()
    assert reader.num_instances(corpus) == 1_000_000
    assert sum(reader.share_sizes(corpus, 4)) == 1_000_000
    numbers, owned = [], []
    for slot in range(4):
        share = reader._shares.share(corpus, ReaderSlot(slot // 2, 2, slot % 2, 2), None)
        for line in share.lines():
            numbers.append(line.text)
            owned.append(line.own)
        assert share.statistics.lines == share.end - share.first
    assert all(owned)
    assert numpy.array_equal(numpy.array(numbers, dtype=numpy.int64), numpy.arange(1_000_000))
    # The reader's instances of the last of 64 shares: the corpus's last 15,625 lines.
    reader._set_distributed_info(DistributedInfo(64, 63))
    assert _texts(reader.read(corpus)) == [
        ("<S>", str(number), "</S>") for number in range(984_375, 1_000_000)
    ]


def test_an_instance_read_twice_or_past_the_share_raises(tmp_path, monkeypatch):
    corpus = _write_shards(tmp_path / "corpus", [12])
    reader = LanguageModelCorpusReader()
    sentences = LanguageModelCorpusReader._sentences
    monkeypatch.setattr(
        LanguageModelCorpusReader,
        "_sentences",
        lambda self, share: (pair for pair in sentences(self, share) for _ in range(2)),
    )
    with pytest.raises(
        EpochLengthError, match=r"share 1 of 1 .* lost instance 1 .*read instance 0 in its place"
    ):
        list(reader.read(corpus))
    monkeypatch.setattr(
        LanguageModelCorpusReader,
        "_sentences",
        lambda self, share: iter(list(sentences(self, share)) + [(12, [])]),
    )
    with pytest.raises(
        EpochLengthError, match=r"read instance 12 past its last, 11 \(12 instances by its index\)"
    ):
        list(reader.read(corpus))
