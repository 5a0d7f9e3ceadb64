"""The corpus index (`corpus_index.py`) and the shares it gives each (rank, worker) reader."""

import logging
import multiprocessing
import os
import random
from pathlib import Path

import numpy
import pytest

from allennlp.data.dataset_readers.dataset_reader import DistributedInfo, WorkerInfo

from elmoc_allennlp.data.dataset_readers import corpus_index
from elmoc_allennlp.data.dataset_readers.corpus_index import (
    INVALID_LINE,
    index_path_beside,
    index_path_in_cache,
    index_lines,
    load_indexes,
)
from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import LanguageModelCorpusReader


@pytest.fixture(autouse=True)
def fresh_process_memo():
    """Each test sees indexes as a new process does (not the ones loaded by an earlier test)."""
    corpus_index._LOADED.clear()
    yield
    corpus_index._LOADED.clear()


def _texts(instances):
    return [tuple(token.text for token in instance["tokens"].tokens) for instance in instances]


def _shards(directory: Path, sizes, seed: int = 0) -> Path:
    """Shards of unique sentences (`s<n>` tokens), `sizes[i]` lines in shard i, some blank."""
    rng = random.Random(seed)
    directory.mkdir()
    number = 0
    for shard, size in enumerate(sizes):
        lines = []
        for _ in range(size):
            if rng.random() < 0.05:
                lines.append("")
                continue
            lines.append(" ".join(f"s{number}w{k}" for k in range(rng.randint(1, 12))))
            number += 1
        (directory / f"news-{shard:05d}-of-{len(sizes):05d}").write_text("\n".join(lines) + "\n")
    return directory


def _read_as(reader, corpus, rank, world_size, worker, num_workers):
    reader._set_distributed_info(DistributedInfo(world_size, rank) if world_size > 1 else None)
    reader._set_worker_info(WorkerInfo(num_workers, worker) if num_workers > 1 else None)
    return _texts(reader.read(corpus)), dict(reader.last_read_statistics)


def test_index_counts_every_line_as_the_reader_would(tmp_path, monkeypatch):
    corpus = tmp_path / "odd.txt"
    # Long lines are read in pieces: split them at awkward places (inside a token, inside a
    # multi-byte character, between "\r" and "\n").
    monkeypatch.setattr(corpus_index, "_PIECE", 7)
    lines = [
        b"\xef\xbb\xbfone two",
        b"",
        b"   \t ",
        b"\xc2\xa0\xe3\x80\x80",
        b"caf\xc3\xa9 na\xc3\xafve x",
        b"abc defgh ijklmn\x00op q",
        b"bad \xff byte",
        b"tail\r",
    ]
    corpus.write_bytes(b"\n".join(lines) + b"\r\nno newline at the end")
    offsets, tokens, breaks = index_lines(str(corpus))
    expected = []
    for raw in corpus.read_bytes()[3:].split(b"\n"):
        try:
            expected.append(len(raw.decode("utf-8").split()))
        except UnicodeDecodeError:
            expected.append(INVALID_LINE)
    assert list(tokens) == expected
    assert offsets[0] == 3 and offsets[-1] == corpus.stat().st_size
    assert list(breaks) == [1] * 7 + [3, 0]  # "tail\r" + "\r\n"


def test_built_once_cached_beside_and_reused(tmp_path, monkeypatch, caplog):
    corpus = _shards(tmp_path / "c", [30, 40])
    reader = LanguageModelCorpusReader()
    first = _texts(reader.read(corpus))
    indexes = sorted(path.name for path in (tmp_path / "c").iterdir() if path.name.startswith("."))
    assert indexes == [".news-00000-of-00002.elmoc-index", ".news-00001-of-00002.elmoc-index"]

    built = []
    monkeypatch.setattr(corpus_index, "_build_one", lambda path: built.append(path))
    corpus_index._LOADED.clear()  # as a new process
    assert _texts(LanguageModelCorpusReader().read(corpus)) == first
    assert built == []


def test_an_edited_corpus_file_is_indexed_again(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha beta\ngamma\n")
    reader = LanguageModelCorpusReader(start_token=None, end_token=None)
    assert _texts(reader.read(corpus)) == [("alpha", "beta"), ("gamma",)]
    stat = corpus.stat()
    # Same size, same modification time, other content: the content sample tells.
    corpus.write_text("alpha\nbeta gamma\n")
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    corpus_index._LOADED.clear()  # a new process (the same one would see the new inode time)
    assert _texts(reader.read(corpus)) == [("alpha",), ("beta", "gamma")]
    # A longer file.
    corpus.write_text("one two three\nfour\nfive six\n")
    assert _texts(reader.read(corpus)) == [("one", "two", "three"), ("four",), ("five", "six")]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "lie"])
def test_a_damaged_index_is_rebuilt_with_a_warning_naming_it(tmp_path, caplog, damage):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\nd e\n\nf\n" * 50)
    reader = LanguageModelCorpusReader()
    expected = _texts(reader.read(corpus))
    index_file = Path(index_path_beside(str(corpus)))
    data = bytearray(index_file.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[-30] ^= 0x10
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    else:
        # What an attacker would write: a header claiming 2**40 lines (the reader must not
        # allocate them) over a correct key.
        data[12:20] = (1 << 40).to_bytes(8, "little")
    index_file.write_bytes(bytes(data))
    corpus_index._LOADED.clear()
    with caplog.at_level(logging.WARNING, logger=corpus_index.__name__):
        assert _texts(reader.read(corpus)) == expected
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(index_file) in warnings[0] and "damaged" in warnings[0]
    # Rebuilt: the next process loads it without a warning.
    caplog.clear()
    corpus_index._LOADED.clear()
    with caplog.at_level(logging.WARNING, logger=corpus_index.__name__):
        assert _texts(reader.read(corpus)) == expected
    assert not caplog.records


def test_an_index_that_lies_about_a_line_is_caught_when_the_line_is_read(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\nd e\n")
    reader = LanguageModelCorpusReader()
    list(reader.read(corpus))
    index = corpus_index._LOADED[str(corpus)][1]
    index.tokens[1] = 1  # a consistent but wrong count (as a stranger's index could have)
    reader = LanguageModelCorpusReader()
    with pytest.raises(Exception, match=r"c.txt, line 2: 2 tokens where its index counted 1"):
        list(reader.read(corpus))


def test_a_read_only_corpus_folder_puts_the_index_in_the_cache_folder(tmp_path, monkeypatch):
    corpus = _shards(tmp_path / "ro", [20])
    cache = tmp_path / "cache"
    os.chmod(corpus, 0o555)
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # root may write anyway: as another user would
        monkeypatch.setattr(corpus_index, "_writable_directory", lambda directory: False)
    try:
        reader = LanguageModelCorpusReader(index_directory=str(cache))
        expected = _texts(reader.read(corpus))
        path = str(corpus / "news-00000-of-00001")
        assert not os.path.exists(index_path_beside(path))
        assert os.path.exists(index_path_in_cache(path, str(cache)))
        corpus_index._LOADED.clear()
        assert _texts(reader.read(corpus)) == expected
    finally:
        os.chmod(corpus, 0o755)


def _build_in_child(path: str, barrier) -> None:
    barrier.wait()
    load_indexes([path], processes=1)


def test_concurrent_builders_leave_one_good_index(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("one two three\n" * 20_000)
    context = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    barrier = context.Barrier(4)
    children = [
        context.Process(target=_build_in_child, args=(str(corpus), barrier)) for _ in range(4)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [child.exitcode for child in children] == [0] * 4
    assert sorted(os.listdir(tmp_path)) == [".c.txt.elmoc-index", "c.txt"]  # no partial files left
    (index,) = load_indexes([str(corpus)])
    assert index.num_lines == 20_000 and set(index.tokens.tolist()) == {3}


def test_parallel_build_equals_sequential(tmp_path):
    corpus = _shards(tmp_path / "c", [200, 300, 100])
    paths = sorted(str(path) for path in corpus.iterdir())
    parallel = load_indexes(paths, processes=2)
    corpus_index._LOADED.clear()
    for path in paths:
        os.remove(index_path_beside(path))
    sequential = load_indexes(paths, processes=1)
    for one, other in zip(parallel, sequential):
        assert numpy.array_equal(one.offsets, other.offsets) and numpy.array_equal(
            one.tokens, other.tokens
        )


@pytest.mark.parametrize("mode", ["sentence", "window"])
def test_8_shards_on_2_ranks_of_2_workers_each_reader_reads_its_quarter(tmp_path, mode):
    corpus = _shards(tmp_path / "c", [400] * 8)
    options = (
        dict(mode="window", window_length=5) if mode == "window" else dict(max_sequence_length=6)
    )
    corpus_bytes = sum(
        path.stat().st_size for path in corpus.iterdir() if not path.name.startswith(".")
    )
    for epoch in (0, 1):
        reader = LanguageModelCorpusReader(shuffle=True, seed=3, **options)
        reader.set_epoch(epoch)
        everything, _ = _read_as(reader, corpus, 0, 1, 0, 1)
        shares, statistics = [], []
        for rank in range(2):
            for worker in range(2):
                share, share_statistics = _read_as(reader, corpus, rank, 2, worker, 2)
                shares.append(share)
                statistics.append(share_statistics)
        # The single process's order, cut into 4: every sentence (window) once.
        assert [instance for share in shares for instance in share] == everything
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        for share_statistics in statistics:
            assert share_statistics["files"] <= 3
            assert share_statistics["bytes"] <= 0.3 * corpus_bytes
        assert sum(s["bytes"] for s in statistics) <= 1.05 * corpus_bytes


def test_99_uneven_shards_on_4_ranks_none_dropped(tmp_path):
    sizes = [random.Random(shard).randint(20, 200) for shard in range(99)]
    corpus = _shards(tmp_path / "c", sizes)
    reader = LanguageModelCorpusReader(mode="window", window_length=4, shuffle=True)
    reader.set_epoch(2)
    everything, total = _read_as(reader, corpus, 0, 1, 0, 1)
    shares = [_read_as(reader, corpus, rank, 4, 0, 1)[0] for rank in range(4)]
    assert [instance for share in shares for instance in share] == everything
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    # The trainer stops the epoch when the first rank runs out of batches; with equal shares the
    # ranks' batch counts differ only when the total is within R - 1 of a multiple of R x batch.
    for batch_size in (1, 7, 32, 100):
        batches = [-(-len(share) // batch_size) for share in shares]
        trained = sum(min(len(share), min(batches) * batch_size) for share in shares)
        if len(everything) % (4 * batch_size) == 0 or len(everything) % (4 * batch_size) >= 4:
            assert len(set(batches)) == 1 and trained == len(everything), batch_size
        else:
            assert trained >= len(everything) - 3


def test_sentences_with_another_tokenizer_are_counted_by_it(tmp_path):
    from allennlp.data.tokenizers import CharacterTokenizer

    corpus = tmp_path / "c.txt"
    corpus.write_text("ab c\n\nxyz\n")
    reader = LanguageModelCorpusReader(
        tokenizer=CharacterTokenizer(), max_sequence_length=3, start_token=None, end_token=None
    )
    assert reader.share_sizes(str(corpus)) == [3]  # "ab c": 4 characters, split in 2
    assert _texts(reader.read(corpus)) == [("a", "b", " "), ("c",), ("x", "y", "z")]


def _plain_index(data: bytes):
    """The reference: each line's offset, whitespace tokens and line-break bytes, from `split`."""
    position = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    offsets, tokens, breaks = [position], [], []
    pieces = data[position:].split(b"\n")
    for number, raw in enumerate(pieces):
        if number == len(pieces) - 1 and not raw:
            break  # after the last line break
        full = raw + (b"\n" if number < len(pieces) - 1 else b"")
        position += len(full)
        offsets.append(position)
        try:
            tokens.append(len(raw.decode("utf-8").split()))
        except UnicodeDecodeError:
            tokens.append(INVALID_LINE)
        breaks.append(len(full) - len(full.rstrip(b"\r\n")))
    return offsets, tokens, breaks


def _line_of(size: int, seed: int) -> bytes:
    """`size` bytes (without a line break) of words and 2-byte characters, no line break in it."""
    pattern = b"ab c\xc3\xa9d  efghij\t\xc3\xa9 k lmnopqrstu "
    pattern = pattern[seed % len(pattern) :] + pattern[: seed % len(pattern)]
    line = (pattern * (size // len(pattern) + 2))[:size]
    if line.startswith(b"\xa9"):  # (not half a character at either end)
        line = b"z" + line[1:]
    return line[:-1] + b"z" if line.endswith(b"\xc3") else line


# Lines are read in pieces of _PIECE bytes: lines (with their line break) of k*B - 1, k*B and
# k*B + 1 bytes, a token or a 2-byte character across the piece's end, and a last line without
# a line break of those sizes; and (cheaper) the same around a piece of 64 bytes.
@pytest.mark.parametrize("piece", [None, 64])
def test_lines_at_multiples_of_the_piece(tmp_path, monkeypatch, piece):
    if piece is not None:
        monkeypatch.setattr(corpus_index, "_PIECE", piece)
    size = corpus_index._PIECE
    assert piece is not None or size == 1 << 20
    lengths = [k * size + d for k in (1, 2) for d in (-1, 0, 1)]
    files = {}
    for ending in (b"\n", b"\r\n"):  # lines of these sizes with their line break
        files[ending] = b"".join(
            _line_of(length - len(ending), seed) + ending for seed, length in enumerate(lengths)
        )
    for seed, length in enumerate(lengths):  # a last line of this size without one
        files[length] = b"one line\r\n" + _line_of(length, seed)
    for name, data in files.items():
        corpus = tmp_path / f"piece-{name!r}.txt"
        corpus.write_bytes(data)
        assert [list(array) for array in index_lines(str(corpus))] == list(_plain_index(data)), name


# The content sample of _SAMPLE bytes at the start, middle and end of a file: files of k*B - 1,
# k*B and k*B + 1 bytes; a changed byte at any of the three places (same size, same modification
# time) makes the index stale, and it is rebuilt with the change.
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("d", [-1, 0, 1])
def test_the_content_sample_at_multiples_of_its_size(tmp_path, k, d):
    size = k * corpus_index._SAMPLE + d
    assert corpus_index._SAMPLE == 4096
    data = bytearray((b"abcdefg hijklmn\n" * (size // 16 + 1))[:size])
    data[-1:] = b"\n"
    corpus = tmp_path / "sample.txt"
    for place in (0, size // 2, size - 2):
        data[place : place + 1] = b"\n" if data[place : place + 1] != b"\n" else b"x"
        corpus.write_bytes(bytes(data))
        os.utime(corpus, ns=(10**18, 10**18))
        corpus_index._LOADED.clear()  # (a new process)
        (index,) = load_indexes([str(corpus)])
        assert list(index.tokens) == _plain_index(bytes(data))[1]


# Indexing is parallel from _PARALLEL_MIN_BYTES (and shows a bar from _BAR_MIN_BYTES): corpora of
# k*B - 1, k*B and k*B + 1 bytes in 3 files, around smaller constants; the same index either way.
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("d", [-1, 0, 1])
def test_parallel_indexing_and_its_bar_at_multiples_of_their_thresholds(
    tmp_path, monkeypatch, caplog, k, d
):
    monkeypatch.setattr(corpus_index, "_PARALLEL_MIN_BYTES", 1000)
    monkeypatch.setattr(corpus_index, "_BAR_MIN_BYTES", 1000)
    bars = []
    real_tqdm = corpus_index.Tqdm.tqdm
    monkeypatch.setattr(
        corpus_index.Tqdm,
        "tqdm",
        lambda *a, **kw: bars.append(kw["disable"]) or real_tqdm(*a, **kw),
    )
    total = k * 1000 + d
    sizes = [total // 3, total // 3, total - 2 * (total // 3)]
    paths = []
    for number, size in enumerate(sizes):
        path = tmp_path / f"part-{number}.txt"
        path.write_bytes((f"file{number} " * size).encode()[: size - 1] + b"\n")
        paths.append(str(path))
    with caplog.at_level(logging.INFO, logger=corpus_index.__name__):
        indexes = load_indexes(paths, processes=None)
    expected_processes = min(os.cpu_count() or 1, 3) if total >= 1000 else 1
    assert f"once; {expected_processes} process(es))" in caplog.text
    assert bars == [total < 1000]
    for index, path in zip(indexes, paths):
        offsets, tokens, breaks = _plain_index(Path(path).read_bytes())
        assert (list(index.offsets), list(index.tokens), list(index.breaks)) == (
            offsets,
            tokens,
            breaks,
        )
