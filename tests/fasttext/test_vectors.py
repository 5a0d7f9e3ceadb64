import copy
import ctypes
import os
import pickle
import struct
from pathlib import Path

import fasttext
import numpy as np
import pytest
import torch

from allennlp.common.checks import ConfigurationError

from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.fasttext.vectors import FastTextFormatError, FastTextVectors, fasttext_hash

# Words that exercise the n-gram rules: OOV, multi-byte UTF-8 (2, 3 and 4 bytes), the empty
# string, the EOS word, and the boundary characters themselves.
PROBE_WORDS = ["café", "naïve", "日本語", "😀", "", "</s>", "<", ">", "<>", "zzyzx", "e\u0301", "a"]


def _synthetic(
    tmp_path,
    name="model.bin",
    words=("</s>", "the", "cat"),
    minn=2,
    maxn=4,
    bucket=50,
    dim=8,
    seed=0,
):
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((len(words) + bucket, dim)).astype(np.float32)
    return (
        write_fasttext_bin(
            tmp_path / name, list(words), matrix, minn=minn, maxn=maxn, bucket=bucket
        ),
        matrix,
    )


def _mmap_address(vectors: FastTextVectors) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(vectors._mmap))


class TestAgainstFastText:
    def test_header_and_dictionary_match_fasttext(self, tiny_fasttext_path):
        model = fasttext.load_model(str(tiny_fasttext_path))
        vectors = FastTextVectors(tiny_fasttext_path)
        args = model.f.getArgs()
        assert vectors.dim == model.get_dimension() == args.dim
        assert (vectors.minn, vectors.maxn, vectors.bucket) == (args.minn, args.maxn, args.bucket)
        assert vectors.maxn > 0 and vectors.bucket > 0
        assert vectors.words == model.get_words()
        assert vectors.num_words == len(model.get_words())
        assert vectors.num_rows == vectors.num_words + args.bucket
        assert vectors.path == Path(tiny_fasttext_path)
        for index, word in enumerate(model.get_words()):
            assert vectors.word_id(word) == model.get_word_id(word) == index
        assert vectors.word_id("not-a-word") == model.get_word_id("not-a-word") == -1
        assert vectors.word_id(vectors.eos_word) >= 0

    def test_input_matrix_matches_fasttext(self, tiny_fasttext_path):
        model = fasttext.load_model(str(tiny_fasttext_path))
        vectors = FastTextVectors(tiny_fasttext_path)
        matrix = vectors.input_matrix
        assert matrix.dtype == torch.float32 and matrix.device.type == "cpu"
        assert tuple(matrix.shape) == (vectors.num_rows, vectors.dim)
        assert np.array_equal(matrix.numpy(), model.get_input_matrix())
        ids = [0, 5, vectors.num_rows - 1, 5]
        assert torch.equal(vectors.rows(ids), matrix[ids])

    def test_subword_ids_and_word_vectors_match_fasttext(self, tiny_fasttext_path):
        model = fasttext.load_model(str(tiny_fasttext_path))
        vectors = FastTextVectors(tiny_fasttext_path)
        for word in model.get_words() + PROBE_WORDS:
            expected_ids = [int(i) for i in model.get_subwords(word)[1]]
            assert vectors.subword_ids(word) == expected_ids, word
            np.testing.assert_allclose(
                vectors.word_vector(word),
                model.get_word_vector(word),
                rtol=1e-5,
                atol=1e-7,
                err_msg=repr(word),
            )
        # In-vocabulary: own id first, then n-grams; the EOS word has no n-grams.
        assert vectors.subword_ids("the")[0] == vectors.word_id("the")
        assert len(vectors.subword_ids("the")) > 1
        assert vectors.subword_ids("</s>") == [vectors.word_id("</s>")]
        # The empty string is "<>": one 2-gram if minn <= 2 <= maxn.
        assert len(vectors.subword_ids("")) == int(vectors.minn <= 2 <= vectors.maxn)

    def test_format_version_11_is_read_as_fasttext_reads_it(self, tiny_fasttext_path, tmp_path):
        # A real training run's file, stamped version 11 (what fastText releases before 0.2
        # wrote for unsupervised models, in the same layout): fastText loads it unchanged.
        data = bytearray(Path(tiny_fasttext_path).read_bytes())
        assert struct.unpack_from("<i", data, 4) == (12,)
        struct.pack_into("<i", data, 4, 11)
        old = tmp_path / "version11.bin"
        old.write_bytes(bytes(data))
        model = fasttext.load_model(str(old))
        vectors = FastTextVectors(old)
        current = FastTextVectors(tiny_fasttext_path)
        assert vectors.words == current.words == model.get_words(include_freq=False)
        for word in model.get_words()[:50] + PROBE_WORDS:
            assert vectors.subword_ids(word) == [int(i) for i in model.get_subwords(word)[1]]
            np.testing.assert_allclose(
                vectors.word_vector(word), model.get_word_vector(word), rtol=1e-5, atol=1e-7
            )
        every_row = range(current.num_rows)
        assert torch.equal(vectors.rows(every_row), current.rows(every_row))

    def test_ngrams_follow_utf8_characters_and_skip_boundary_unigrams(self, tmp_path):
        # minn=1 makes 1-grams count: "<" and ">" alone must be excluded, "é" (2 bytes) is 1 char.
        path, _ = _synthetic(tmp_path, words=("</s>",), minn=1, maxn=2, bucket=1000)
        vectors = FastTextVectors(path)
        expected_ngrams = ["<c", "c", "ca", "a", "af", "f", "fé", "é", "é>"]
        expected = [1 + fasttext_hash(g.encode("utf-8")) % 1000 for g in expected_ngrams]
        assert vectors.subword_ids("café") == expected
        model = fasttext.load_model(str(path))
        assert model.get_subwords("café")[0] == expected_ngrams

    def test_hash_sign_extends_bytes_like_fasttext(self):
        assert fasttext_hash(b"") == 2166136261
        # 'a' is ASCII: plain FNV-1a.
        assert fasttext_hash(b"a") == ((2166136261 ^ 0x61) * 16777619) & 0xFFFFFFFF
        # 0xC3 is XORed as 0xFFFFFFC3 (signed char), not 0xC3.
        assert fasttext_hash(b"\xc3") == ((2166136261 ^ 0xFFFFFFC3) * 16777619) & 0xFFFFFFFF

    def test_no_ngrams_when_maxn_is_zero(self, tmp_path):
        path, matrix = _synthetic(tmp_path, minn=0, maxn=0, bucket=0)
        vectors = FastTextVectors(path)
        model = fasttext.load_model(str(path))
        assert vectors.num_rows == 3
        for word in ["the", "cat", "</s>"] + PROBE_WORDS:
            assert vectors.subword_ids(word) == [int(i) for i in model.get_subwords(word)[1]]
            np.testing.assert_allclose(vectors.word_vector(word), model.get_word_vector(word))
        assert vectors.subword_ids("dog") == [] and vectors.subword_ids("") == []
        assert np.array_equal(vectors.word_vector("dog"), np.zeros(8, dtype=np.float32))
        assert np.array_equal(vectors.word_vector("cat"), matrix[2])

    @pytest.mark.parametrize("padding", [0, 1, 2, 3])
    def test_any_matrix_alignment(self, tmp_path, padding):
        # The word length moves the matrix to each offset modulo 4.
        words = ("</s>", "the", "x" * (1 + padding))
        path, matrix = _synthetic(tmp_path, words=words, minn=2, maxn=4, bucket=40, seed=padding)
        vectors = FastTextVectors(path)
        model = fasttext.load_model(str(path))
        for word in list(words) + PROBE_WORDS:
            assert vectors.subword_ids(word) == [int(i) for i in model.get_subwords(word)[1]]
            np.testing.assert_allclose(
                vectors.word_vector(word), model.get_word_vector(word), rtol=1e-5, atol=1e-7
            )
        ids = torch.tensor([[0, 7], [42, 1]])
        assert torch.equal(vectors.rows(ids), torch.from_numpy(matrix[[0, 7, 42, 1]]))
        table = vectors.input_matrix
        assert np.array_equal(table.numpy(), matrix)
        # Never a misaligned float32 tensor: a zero-copy view if aligned, else a copy.
        assert table.data_ptr() % 4 == 0
        aligned = vectors._matrix_offset % 4 == 0
        in_map = table.data_ptr() == _mmap_address(vectors) + vectors._matrix_offset
        assert in_map == aligned

    def test_rows_reads_the_memory_map_without_copying_the_table(self, tiny_fasttext_path):
        vectors = FastTextVectors(tiny_fasttext_path)
        byte_view = vectors._matrix_bytes
        assert byte_view.data_ptr() == _mmap_address(vectors) + vectors._matrix_offset
        assert tuple(byte_view.shape) == (vectors.num_rows, vectors.dim * 4)
        out = torch.empty(2, vectors.dim)
        assert vectors.rows([3, 4], out=out) is out
        assert vectors.rows([]).shape == (0, vectors.dim)
        with pytest.raises(IndexError, match="out of range"):
            vectors.rows([vectors.num_rows])


class TestCachingAndSharing:
    def test_from_path_loads_once_per_file_version(self, tmp_path, monkeypatch):
        path, _ = _synthetic(tmp_path)
        first = FastTextVectors.from_path(path)
        assert FastTextVectors.from_path(str(path)) is first
        monkeypatch.chdir(tmp_path)
        assert FastTextVectors.from_path("model.bin") is first
        link = tmp_path / "link.bin"
        link.symlink_to(path)
        assert FastTextVectors.from_path(link) is first
        # A new version of the file (new mtime) is reloaded.
        _synthetic(tmp_path, words=("</s>", "dog"), seed=1)
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        second = FastTextVectors.from_path(path)
        assert second is not first and second.words == ["</s>", "dog"]
        assert FastTextVectors.from_path(path) is second

    def test_pickle_and_deepcopy_share_the_cached_instance(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        vectors = FastTextVectors.from_path(path)
        payload = pickle.dumps(vectors)
        assert len(payload) < 1000  # the path, not the table
        assert pickle.loads(payload) is vectors
        assert copy.deepcopy(vectors) is vectors

    def test_subword_ids_are_cached_and_returned_as_fresh_lists(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        vectors = FastTextVectors(path)
        first = vectors.subword_ids("elephant")
        first.append(-5)
        assert vectors.subword_ids("elephant") == first[:-1]
        info = vectors._cached_subword_ids.cache_info()
        assert info.hits == 1 and info.misses == 1


def _patch(path: Path, offset: int, fmt: str, *values) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, *values)
    path.write_bytes(bytes(data))


class TestValidation:
    def _error(self, path, *fragments):
        with pytest.raises(FastTextFormatError) as info:
            FastTextVectors(path)
        message = str(info.value)
        assert str(path) in message
        for fragment in fragments:
            assert fragment in message, message
        assert isinstance(info.value, ConfigurationError)
        return message

    def test_missing_file_and_directory(self, tmp_path):
        self._error(tmp_path / "missing.bin", "file not found")
        self._error(tmp_path, "is a directory")
        with pytest.raises(FastTextFormatError, match="file not found"):
            FastTextVectors.from_path(tmp_path / "missing.bin")

    def test_empty_and_tiny_files(self, tmp_path):
        empty = tmp_path / "empty.bin"
        empty.write_bytes(b"")
        self._error(empty, "0 bytes, too small")

    def test_not_a_fasttext_file(self, tmp_path):
        text = tmp_path / "vectors.vec"
        text.write_text("3 2\nthe 0.1 0.2\n")
        self._error(text, "bad magic number", "text .vec file")
        other = tmp_path / "other.bin"
        other.write_bytes(b"\x00" * 200)
        self._error(other, "bad magic number 0 (expected 793712314)")

    @pytest.mark.parametrize("version", [10, 13])
    def test_wrong_version(self, tmp_path, version):
        path, _ = _synthetic(tmp_path)
        _patch(path, 4, "<i", version)
        self._error(path, f"unsupported fastText format version {version} (readable: 11, 12)")

    def test_truncated_header(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        path.write_bytes(path.read_bytes()[:40])
        self._error(path, "truncated", "header", "file has 40")

    def test_supervised_model(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        _patch(path, 36, "<i", 3)  # args.model = sup
        self._error(path, "supervised (classification) model")
        _patch(path, 36, "<i", 9)
        self._error(path, "unknown model type 9")

    def test_labels_in_an_unsupervised_model(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        _patch(path, 64, "<iii", 4, 3, 1)  # size, nwords, nlabels
        self._error(path, "dictionary has 1 labels")

    def test_quantized_model(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        offset = FastTextVectors(path)._matrix_offset
        _patch(path, offset - 17, "<b", 1)  # the quant_input flag before the matrix header
        self._error(path, "quantized model (.ftz)")
        _patch(path, 84, "<q", 10)  # pruneidx_size
        self._error(path, "pruned n-gram index")

    def test_corrupt_dictionary_and_matrix_header(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        _patch(path, 64, "<i", 7)  # size != nwords + nlabels
        self._error(path, "corrupt dictionary header: size=7, nwords=3, nlabels=0")
        path, _ = _synthetic(tmp_path, name="shape.bin")
        offset = FastTextVectors(path)._matrix_offset
        _patch(path, offset - 16, "<q", 52)
        self._error(path, "input matrix is 52 x 8, expected 53 x 8")

    def test_truncated_dictionary(self, tmp_path):
        path, _ = _synthetic(tmp_path, words=("</s>", "the", "a" * 200))
        path.write_bytes(path.read_bytes()[:200])
        self._error(path, "truncated: dictionary entry 2 of 3 is incomplete")
        _patch(path, 64, "<ii", 10**6, 10**6)
        self._error(path, "truncated: the dictionary has 1,000,000 entries")

    def test_truncated_input_matrix_names_the_byte_counts(self, tmp_path):
        path, _ = _synthetic(tmp_path)  # 53 x 8 floats = 1,696 bytes
        offset = FastTextVectors(path)._matrix_offset
        path.write_bytes(path.read_bytes()[: offset + 1000])
        self._error(path, "truncated: expected 1,696 bytes for the input matrix, file has 1,000")

    def test_truncated_output_matrix(self, tmp_path):
        path, _ = _synthetic(tmp_path)
        path.write_bytes(path.read_bytes()[:-4])
        self._error(path, "truncated: expected 96 bytes for the output matrix, file has 92")


def test_the_fingerprint_samples_both_the_word_and_the_ngram_rows(tmp_path):
    """Many words, few n-gram buckets: blocks spread over the whole file (the first fingerprint)
    can all miss the n-gram rows; the fingerprint samples each region on its own. The same file
    with its n-gram rows replaced (same size) must not keep its fingerprint."""
    words = ["</s>"] + [f"w{index}" for index in range(4000)]
    bucket, dim = 40, 8
    matrix = np.random.default_rng(0).standard_normal((len(words) + bucket, dim)).astype(np.float32)
    original = write_fasttext_bin(tmp_path / "a.bin", words, matrix, minn=2, maxn=3, bucket=bucket)
    replaced = matrix.copy()
    replaced[len(words) :] = np.random.default_rng(1).standard_normal((bucket, dim))
    forged = write_fasttext_bin(tmp_path / "b.bin", words, replaced, minn=2, maxn=3, bucket=bucket)
    assert original.stat().st_size == forged.stat().st_size
    first, second = FastTextVectors(original), FastTextVectors(forged)
    for vectors in (first, second):
        vectors.fingerprint_block_bytes = 64  # 64 blocks of 64 bytes: a sparse sample
    # Spread over the whole file, the 64 blocks skip this file's n-gram rows entirely.
    whole = [(first._matrix_offset, first._file_size)]
    assert first._sampled_digest(whole) == second._sampled_digest(whole)
    assert first.fingerprint != second.fingerprint
    assert first.fingerprint.startswith("2:")


def test_the_writer_streams_row_blocks_into_the_same_file(tmp_path):
    words = ["</s>", "a", "bc"]
    matrix = np.random.default_rng(0).standard_normal((3 + 7, 4), dtype=np.float32)
    whole = write_fasttext_bin(tmp_path / "whole.bin", words, matrix, minn=2, maxn=3, bucket=7)
    blocks = write_fasttext_bin(
        tmp_path / "blocks.bin",
        words,
        (matrix[i : i + 4] for i in range(0, 10, 4)),
        minn=2,
        maxn=3,
        bucket=7,
    )
    assert blocks.read_bytes() == whole.read_bytes()
    vectors = FastTextVectors(str(blocks))
    np.testing.assert_array_equal(vectors.rows(torch.arange(10)).numpy(), matrix)


@pytest.mark.parametrize("rows", [9, 11])
def test_the_writer_refuses_blocks_of_the_wrong_size_and_leaves_no_file(tmp_path, rows):
    matrix = np.zeros((rows, 4), dtype=np.float32)
    path = tmp_path / "short.bin"
    with pytest.raises(ConfigurationError, match="expected 10"):
        write_fasttext_bin(
            path, ["</s>", "a", "bc"], iter([matrix[:5], matrix[5:]]), minn=2, maxn=3, bucket=7
        )
    assert not path.exists()


# ---------------------------------------------------------------------- at the sizes of the internal blocks


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("k", [1, 2])
def test_the_writer_zero_fills_the_output_matrix_in_blocks_of_65536_rows(tmp_path, k, offset):
    # `write_fasttext_bin` writes the output matrix's zeros 65,536 rows at a time.
    words = ["</s>"] + [f"w{index}" for index in range(k * 65536 + offset - 1)]
    matrix = np.arange(len(words), dtype=np.float32).reshape(-1, 1)
    path = write_fasttext_bin(tmp_path / "words.bin", words, matrix, minn=0, maxn=0, bucket=0)
    data = path.read_bytes()
    tail = data[len(data) - (1 + 16 + len(words) * 4) :]
    assert tail[:17] == b"\0" + struct.pack("<qq", len(words), 1)
    assert tail[17:] == bytes(len(words) * 4)  # every row, once, zero
    vectors = FastTextVectors(path)  # the reader checks the file's size to the byte
    assert vectors.num_words == len(words) and vectors.words[-1] == words[-1]
    np.testing.assert_array_equal(vectors.rows(np.arange(len(words))).numpy(), matrix)


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["row_below", "at", "row_above"])
@pytest.mark.parametrize("k", [1, 2])
def test_every_byte_of_a_region_up_to_32_blocks_counts_in_the_fingerprint(tmp_path, k, offset):
    # Each region (word rows, n-gram rows) is hashed as 32 blocks spread over it: one of k blocks
    # (and a row less or more) is hashed whole, so changing any one byte changes the fingerprint.
    block = 32  # bytes: 8 rows of dim 1
    rows = k * block // 4 + offset
    words = ["</s>"] + [f"w{index}" for index in range(rows - 1)]
    matrix = np.random.default_rng(k).standard_normal((rows + rows, 1)).astype(np.float32)
    path = write_fasttext_bin(tmp_path / "regions.bin", words, matrix, minn=2, maxn=3, bucket=rows)
    vectors = FastTextVectors(path)
    vectors.fingerprint_block_bytes = block
    original = vectors.fingerprint
    start, end = vectors._matrix_offset, vectors._matrix_offset + 2 * rows * 4
    unchanged = []
    for position in range(start, end):
        vectors._mmap[position] ^= 0x40  # copy-on-write: the file is not changed
        vectors._fingerprint = None
        if vectors.fingerprint == original:
            unchanged.append(position - start)
        vectors._mmap[position] ^= 0x40
    assert not unchanged, f"bytes of the matrices not in the fingerprint: {unchanged}"
    vectors._fingerprint = None
    assert vectors.fingerprint == original


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("k", [1, 2])
def test_the_subword_cache_gives_the_computed_ids_past_its_size(tmp_path, monkeypatch, k, offset):
    monkeypatch.setattr(FastTextVectors, "subword_cache_size", 4)
    path, _ = _synthetic(tmp_path)
    vectors = FastTextVectors(path)
    words = [f"word{index}" for index in range(k * 4 + offset)] + ["the", "cat"]
    expected = {word: list(vectors._compute_subword_ids(word)) for word in words}
    for word in words + words[::-1] + words:  # evicted, re-read, read again
        assert vectors.subword_ids(word) == expected[word], word
    assert vectors._cached_subword_ids.cache_info().currsize == min(4, len(words))


@pytest.mark.parametrize(
    "value, refused",
    [
        (np.nextafter(np.float32(1e6), np.float32(0)), False),
        (np.float32(1e6), True),
        (np.nextafter(np.float32(1e6), np.float32(np.inf)), True),
        (-np.nextafter(np.float32(1e6), np.float32(0)), False),
        (np.float32(-1e6), True),
    ],
    ids=["below", "at", "above", "negative_below", "negative_at"],
)
def test_rows_at_the_largest_magnitude_accepted(tmp_path, value, refused):
    from elmoc_allennlp.fasttext.vectors import MAX_ABS_VALUE

    assert MAX_ABS_VALUE == 1e6
    words = ["</s>", "the", "cat"]
    matrix = np.zeros((3 + 5, 2), dtype=np.float32)
    matrix[2, 1] = value
    path = write_fasttext_bin(tmp_path / "large.bin", words, matrix, minn=2, maxn=3, bucket=5)
    vectors = FastTextVectors(path)
    if refused:
        with pytest.raises(
            FastTextFormatError, match=r"row 2 of the input matrix, the vector of the word 'cat'"
        ):
            vectors.rows([0, 1, 2])
    else:
        assert vectors.rows([0, 1, 2])[2, 1].item() == value
