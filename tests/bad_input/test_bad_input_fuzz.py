"""
Bad input at scale: fuzzing the corpus reader and the fastText loader. Every case must end in
one of: instances, a skipped-and-counted line, or a `ConfigurationError` naming the file (and
the line, for corpus text); never another exception, a crash or a hang.
"""

import contextlib
import random
import signal
import struct
import tracemalloc
from pathlib import Path
from typing import Iterator, List, Optional

import numpy as np
import pytest

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import (
    CorpusDecodingError,
    LanguageModelCorpusReader,
)
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.fasttext.vectors import (
    FastTextFormatError,
    FastTextVectors,
    clear_fasttext_cache,
)
from benchmarks.common import write_fasttext_bin

CASE_TIMEOUT_SECONDS = 20


@contextlib.contextmanager
def _deadline(seconds: float = CASE_TIMEOUT_SECONDS) -> Iterator[None]:
    """
    Fails the case instead of hanging the suite: after `seconds` of this process's CPU time
    (`ITIMER_PROF`), which a loop that never ends spends and a busy machine does not stretch
    (a wall-clock limit fails slow cases when other processes have the cores).
    """

    def expired(signum, frame):
        raise TimeoutError(f"case did not finish within {seconds} s of CPU time")

    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _expected_lines(data: bytes) -> List[Optional[str]]:
    """Each line decoded independently of the reader (`None` when it is not UTF-8)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    decoded: List[Optional[str]] = []
    for line in lines:
        try:
            decoded.append(line.rstrip(b"\r").decode("utf-8"))
        except UnicodeDecodeError:
            decoded.append(None)
    return decoded


def _check_corpus(path: Path, data: bytes) -> str:
    """Reads `path` strictly and with skipping, against an independent decoding of `data`."""
    expected = _expected_lines(data)
    first_bad = next((i + 1 for i, line in enumerate(expected) if line is None), None)
    good_sentences = [line.split() for line in expected if line is not None and line.split()]
    outcome = "read"
    with _deadline():
        strict = LanguageModelCorpusReader(max_sequence_length=10_000_000)
        try:
            instances = list(strict.read(path))
        except CorpusDecodingError as error:
            assert first_bad is not None, error
            assert str(path) in str(error) and f"line {first_bad}:" in str(error)
            assert error.line_number == first_bad
            outcome = "error naming file and line"
        except ConfigurationError as error:
            assert not good_sentences and first_bad is None, error  # an empty/blank corpus
            assert str(path) in str(error)
            outcome = "error naming file"
        else:
            assert first_bad is None
            assert [[t.text for t in i["tokens"].tokens][1:-1] for i in instances] == good_sentences

        skipping = LanguageModelCorpusReader(max_sequence_length=10_000_000, invalid_lines="skip")
        try:
            instances = list(skipping.read(path))
        except ConfigurationError as error:
            assert not good_sentences and "has no text" in str(error) and str(path) in str(error)
        else:
            assert [[t.text for t in i["tokens"].tokens][1:-1] for i in instances] == good_sentences
            statistics = skipping.last_read_statistics
            assert statistics["invalid_lines_skipped"] == sum(line is None for line in expected)
            assert statistics["lines"] == len(expected)
    return outcome


def _random_corpus_bytes(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    size = rng.choice([0, 1, 7, 100, 1000, 20_000])
    if kind == 0:  # random bytes
        return bytes(rng.getrandbits(8) for _ in range(size))
    if kind == 1:  # random bytes, many newlines and spaces
        return bytes(rng.choice(b"ab \n\n\x00\xff\xc3\xa9\r") for _ in range(size))
    text = " ".join(
        rng.choice(["the", "bank", "caf\u00e9", "\u65e5\u672c", "\U0001f600", "x"])
        for _ in range(size // 5)
    )
    lines = [text[i : i + rng.randrange(1, 80)] for i in range(0, len(text), 40)]
    data = "\n".join(lines).encode("utf-8")
    if kind == 2:  # valid UTF-8, cut at a random byte (possibly inside a character)
        return data[: rng.randrange(len(data) + 1)]
    if kind == 3:  # mixed encodings: some lines in Latin-1 / Shift-JIS / UTF-16
        encoded = []
        for line in lines:
            encoding = rng.choice(["utf-8", "utf-8", "latin-1", "shift_jis", "utf-16"])
            encoded.append(line.encode(encoding, errors="replace"))
        return b"\n".join(encoded)
    if kind == 4:  # NUL bytes and control characters sprinkled into valid text
        raw = bytearray(data)
        for _ in range(rng.randrange(1, 20)):
            if raw:
                raw.insert(rng.randrange(len(raw)), rng.choice([0, 1, 0x1F, 0x7F, 0x0B, 0x0C]))
        return bytes(raw)
    return data.replace(b"\n", rng.choice([b"\r\n", b"\n\n", b"\r"]))


def test_fuzz_corpus_reader(tmp_path, capsys):
    rng = random.Random(20190212)
    outcomes = {}
    cases = 0
    for index in range(300):
        data = _random_corpus_bytes(rng)
        path = tmp_path / f"shard-{index:05d}.txt"
        path.write_bytes(data)
        outcome = _check_corpus(path, data)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        cases += 1
    assert outcomes.get("error naming file and line", 0) > 30
    assert outcomes.get("read", 0) > 30
    with capsys.disabled():
        print(f"\ncorpus reader fuzz: {cases} random files, outcomes {outcomes}")


def test_lines_of_a_million_characters(tmp_path):
    words = [f"w{i % 1000}" for i in range(200_000)]
    spaced = " ".join(words)[:1_000_000]
    solid = "x" * 1_000_000
    path = tmp_path / "long.txt"
    path.write_text(f"before\n{spaced}\n{solid}\nafter\n", encoding="utf-8")
    with _deadline():
        reader = LanguageModelCorpusReader(max_sequence_length=200, max_token_characters=50)
        instances = list(reader.read(path))
    statistics = reader.last_read_statistics
    assert statistics["sentences"] == 4 and statistics["sentences_split"] == 1
    assert statistics["tokens_truncated"] == 1
    texts = [[t.text for t in i["tokens"].tokens][1:-1] for i in instances]
    assert texts[0] == ["before"] and texts[-1] == ["after"]
    assert texts[-2] == ["x" * 50]
    assert [w for chunk in texts[1:-2] for w in chunk] == spaced.split()

    # The indexer handles whatever the reader produces, in bounded time.
    indexer = FastTextSubwordIndexer(vectors_path=str(_tiny_model(tmp_path)))
    with _deadline():
        indexed = indexer.tokens_to_indices(instances[-2]["tokens"].tokens, Vocabulary())
    assert len(indexed["subword_ids"][0]) <= 50 * 3 + 1

    # A line over max_line_bytes is skipped and counted, without being read into memory whole.
    huge = tmp_path / "binary-shard"
    with open(huge, "wb") as handle:
        handle.write(b"good line\n")
        handle.write(b"\xff" * 20_000_000)
        handle.write(b"\nlast line\n")
    reader = LanguageModelCorpusReader(max_line_bytes=1_000_000)
    tracemalloc.start()
    try:
        with _deadline():
            texts = [[t.text for t in i["tokens"].tokens] for i in reader.read(huge)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert texts == [["<S>", "good", "line", "</S>"], ["<S>", "last", "line", "</S>"]]
    assert reader.last_read_statistics["long_lines_skipped"] == 1
    assert peak < 8_000_000  # a few copies of max_line_bytes, never the 20 MB line


def test_empty_shards_and_globs_that_match_nothing(tmp_path, caplog):
    shards = tmp_path / "shards"
    shards.mkdir()
    for index in range(3):
        (shards / f"news.en-{index:05d}").write_bytes(b"")
    (shards / "news.en-00003").write_bytes(b"\n  \n\t\n")
    with pytest.raises(ConfigurationError, match=r"has no text: its 4 file\(s\) are empty"):
        list(LanguageModelCorpusReader().read(str(shards / "news.en-*")))
    (shards / "news.en-00004").write_text("one sentence\n")
    reader = LanguageModelCorpusReader()
    assert len(list(reader.read(str(shards / "news.en-*")))) == 1
    assert (
        reader.last_read_statistics["files"] == 1
    )  # its index shows the 4 blank files: not opened

    with pytest.raises(ConfigurationError, match="No corpus files found matching .*nothing-\\*"):
        list(LanguageModelCorpusReader().read(str(tmp_path / "nothing-*")))
    with pytest.raises(ConfigurationError, match="no-such-dir"):
        list(LanguageModelCorpusReader().read(str(tmp_path / "no-such-dir" / "x.txt")))

    # Skipped lines are logged with their file and line.
    bad = tmp_path / "mixed.txt"
    bad.write_bytes(b"good\ncaf\xe9 latin-1\nalso good\n")
    reader = LanguageModelCorpusReader(invalid_lines="skip")
    assert len(list(reader.read(bad))) == 2
    assert f"{bad}, line 2: skipped, invalid UTF-8 at byte offset 3" in caplog.text


def test_reader_options_are_validated():
    with pytest.raises(ConfigurationError, match="invalid_lines must be one of"):
        LanguageModelCorpusReader(invalid_lines="ignore")
    with pytest.raises(ConfigurationError, match="max_line_bytes must be a positive integer"):
        LanguageModelCorpusReader(max_line_bytes=0)
    with pytest.raises(ConfigurationError, match="max_token_characters must be a positive"):
        LanguageModelCorpusReader(max_token_characters=True)


# ------------------------------------------------------------------------------------ fastText


def _tiny_model(directory: Path) -> Path:
    path = directory / "fuzz-model.bin"
    if not path.exists():
        words = ["</s>", "the", "bank", "caf\u00e9", "\u65e5\u672c"]
        rng = np.random.default_rng(0)
        matrix = rng.standard_normal((len(words) + 40, 4)).astype(np.float32)
        write_fasttext_bin(path, words, matrix, minn=2, maxn=3, bucket=40)
    return path


def _check_fasttext(path: Path) -> str:
    clear_fasttext_cache()
    with _deadline():
        try:
            vectors = FastTextVectors(path)
        except FastTextFormatError as error:
            assert str(path) in str(error), error
            return "error naming file"
        # Whatever loads must be usable, or name the file (a flipped bit may make a NaN row).
        try:
            for word in ("the", "bank", "unknown", "\u65e5\u672c\u8a9e", "x" * 300):
                vector = vectors.word_vector(word)
                assert vector.shape == (vectors.dim,) and np.isfinite(vector).all()
            vectors.rows([0, vectors.num_rows - 1])
        except FastTextFormatError as error:
            assert str(path) in str(error) and "row" in str(error), error
            return "non-finite row named"
        return "loaded"


def test_fuzz_fasttext_loading(tmp_path, capsys):
    original = _tiny_model(tmp_path).read_bytes()
    rng = random.Random(7)
    outcomes = {}

    def run(data: bytes, name: str) -> None:
        path = tmp_path / name
        path.write_bytes(data)
        outcome = _check_fasttext(path)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    # Truncated at every length.
    for length in range(len(original)):
        run(original[:length], "truncated.bin")
    # Random bytes of many sizes, with and without the right magic number.
    header = struct.pack("<ii", 793712314, 12)
    for size in [0, 1, 7, 8, 60, 100, 1000, 5000] * 10:
        noise = bytes(rng.getrandbits(8) for _ in range(size))
        run(noise, "noise.bin")
        run(header + noise, "noise-with-magic.bin")
    # Header fields (args and dictionary header) set to extreme values.
    for offset in range(8, 8 + 12 * 4 + 8 + 4 * 3 + 8 * 2, 4):
        for value in (0, -1, 1, 2**31 - 1, -(2**31), 3):
            data = bytearray(original)
            data[offset : offset + 4] = struct.pack("<i", value)
            run(bytes(data), "header.bin")
    # Random bit flips anywhere.
    for _ in range(400):
        data = bytearray(original)
        for _ in range(rng.randrange(1, 5)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        run(bytes(data), "flipped.bin")
    # A text .vec file, a directory, a missing file.
    run(b"5 4\nthe 0.1 0.2 0.3 0.4\n", "vectors.vec")
    assert "loaded" in outcomes and outcomes["error naming file"] > len(original)
    for path in (tmp_path, tmp_path / "missing.bin"):
        with pytest.raises(FastTextFormatError, match=str(path)):
            FastTextVectors(path)
    cases = sum(outcomes.values()) + 2
    with capsys.disabled():
        print(f"\nfastText loader fuzz: {cases} files, outcomes {outcomes}")
    assert cases > 1500
