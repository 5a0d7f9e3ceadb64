"""
A pure-Python reader of fastText `.bin` models: the dictionary, the subword (character n-gram)
hashing, and a memory-mapped view of the input matrix (word and n-gram vectors).

The format (version 12, as written by fastText 0.9 and the `fasttext` Python package; version 11,
written by older releases, has the same layout and is read the same way by fastText itself) is,
all little-endian:

* header: magic `int32` 793712314, version `int32` 12 (or 11);
* args: `dim, ws, epoch, minCount, neg, wordNgrams, loss, model, bucket, minn, maxn,
  lrUpdateRate` as `int32`, then `t` as `float64`;
* dictionary: `size int32, nwords int32, nlabels int32, ntokens int64, pruneidx_size int64`, then
  per entry a NUL-terminated UTF-8 word, `count int64`, `type int8` (0 word, 1 label), then
  `pruneidx_size` pairs of `int32` (only in quantized models);
* `quant_input` (1 byte bool), then the dense input matrix: `rows int64, cols int64`, then
  `rows * cols` `float32` (rows = nwords + bucket);
* `quant_output` (1 byte bool) and the output matrix in the same layout (not used here).
"""

import hashlib
import logging
import mmap
import os
import struct
import threading
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.atomic_files import atomic_write

logger = logging.getLogger(__name__)

FASTTEXT_MAGIC = 793712314
FASTTEXT_VERSION = 12
# fastText's `checkModel` accepts any version up to its own and reads 11 and 12 alike (only a
# version-11 *supervised* model is read differently, and those are refused here anyway).
# Nothing older than 11 was ever written with the magic number: refused as unreadable.
FASTTEXT_READABLE_VERSIONS = (11, 12)
# Rows holding a value of this magnitude or more (or NaN / inf) are refused: trained fastText
# vectors are of order 1, and 1e6 squared still fits a LayerNorm's float32 variance.
MAX_ABS_VALUE = 1e6

# `<` + 12 int32 args + a float64 `t`.
_ARGS = struct.Struct("<12id")
_DICTIONARY_HEADER = struct.Struct("<iiiqq")
_ENTRY_TAIL = struct.Struct("<qb")
_MATRIX_HEADER = struct.Struct("<qq")
_HEADER_SIZE = 8 + _ARGS.size + _DICTIONARY_HEADER.size

# fastText's `model_name` enum.
_MODEL_NAMES = {1: "cbow", 2: "skipgram", 3: "supervised"}

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619
# fastText XORs each byte as a *signed* char widened to 32 bits (`uint32_t(int8_t(c))`), so bytes
# >= 0x80 are sign-extended; this table gives the value XORed for each byte.
_SIGNED_BYTE = tuple(b if b < 0x80 else b | 0xFFFFFF00 for b in range(256))


class _Header(NamedTuple):
    version: int
    dim: int
    model: int
    bucket: int
    minn: int
    maxn: int
    nwords: int


def _file_identity(stat: os.stat_result) -> Tuple[int, int, int, int]:
    """What changes when a file is replaced or rewritten: device, inode, size, mtime."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


class FastTextFormatError(ConfigurationError):
    """
    A fastText `.bin` file is missing, unreadable, malformed, or of a kind ELMo-C cannot use
    (quantized, supervised). The message names the file and what is wrong.
    """


def fasttext_hash(data: bytes) -> int:
    """
    fastText's 32-bit FNV-1a hash of a UTF-8 byte string (with fastText's signed-byte quirk).
    """
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ _SIGNED_BYTE[byte]) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def _encode(word: str) -> bytes:
    # Dictionary words are decoded with `surrogateescape`, so invalid UTF-8 round-trips.
    try:
        return word.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return word.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return word.encode("utf-8", "surrogatepass")


class FastTextVectors:
    """
    The word and character n-gram vectors of a fastText `.bin` model, read without the fastText
    library.

    The input matrix is memory-mapped copy-on-write, so opening a multi-GB model costs no RAM up
    front and processes reading the same file share the OS page cache. Use `from_path`, which
    loads each file once per process and shares the instance between the token indexer, the
    token embedder and anything else.

    Rows are read through `rows()` (and `word_vector()`), which is zero-copy for the table and
    safe for any file. The float32 view `input_matrix` is zero-copy only when the matrix starts at
    a 4-byte-aligned file offset: the dictionary is variable-length, so the matrix usually does
    *not* start on a float boundary, and a mapping always puts a file offset at the same address
    modulo the page size. PyTorch accepts a misaligned float32 pointer without complaint, but its
    kernels assume natural alignment (undefined behaviour; may fault or miscompute), so we never
    create one: the matrix is also exposed as a `uint8` tensor (alignment 1), rows are gathered in
    byte space into a fresh (aligned) tensor and only then reinterpreted as `float32`. For
    misaligned files `input_matrix` falls back to an in-memory copy, made on first access.

    Models with labels (supervised models, or unsupervised ones whose corpus contained
    `__label__` tokens) are rejected: fastText gives labels ids that overlap the n-gram rows.
    Quantized (`.ftz`) and pruned models are rejected as well.

    Vectors come from strangers too. Every row `rows()` reads is checked for NaN, inf and
    absurd magnitudes (`MAX_ABS_VALUE`): one min/max pass over the gathered rows, 0.4 ms for
    5,000 rows of 300 floats of a 7.2 GB model (the gather itself takes 1.6 ms), far below a
    training step; checking the whole table when the file is opened would read all of it (21 s
    for that model on a cold page cache; `benchmarks/fasttext_integrity.py`). `fingerprint`
    identifies the content (archives record it, see the `fasttext` token embedder) and
    `check_unchanged` detects a file replaced or rewritten while in use.

    # Parameters

    path : `Union[str, os.PathLike]`
        A fastText `.bin` file (not the text `.vec` file: it has no n-gram vectors).
    """

    eos_word = "</s>"
    # Entries kept by the `subword_ids` LRU cache (words are Zipfian: this covers most tokens).
    subword_cache_size = 2**15
    # How much of the matrices `fingerprint` hashes (4 MB).
    fingerprint_samples = 64
    fingerprint_block_bytes = 1 << 16

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self._path = Path(path).expanduser()
        self._absolute_path = self._path.absolute()
        self._mmap: Optional[mmap.mmap] = None
        self._input_matrix: Optional[torch.Tensor] = None
        self._fingerprint: Optional[str] = None
        self._load()
        self._cached_subword_ids = lru_cache(maxsize=self.subword_cache_size)(
            self._compute_subword_ids
        )

    # ------------------------------------------------------------------ loading and validation

    def _error(self, problem: str) -> FastTextFormatError:
        return FastTextFormatError(f"fastText model {self._path}: {problem}")

    def _load(self) -> None:
        path = self._path
        if not path.exists():
            raise FastTextFormatError(f"fastText model {path}: file not found")
        if path.is_dir():
            raise FastTextFormatError(f"fastText model {path}: is a directory, not a .bin file")
        if not path.is_file():  # a FIFO or a device: opening it could block forever
            raise FastTextFormatError(f"fastText model {path}: is not a regular file")
        try:
            handle = open(path, "rb")
        except OSError as error:
            raise FastTextFormatError(f"fastText model {path}: cannot open ({error})") from error
        with handle:
            stat = os.fstat(handle.fileno())
            file_size = stat.st_size
            if file_size < 8:
                raise self._error(
                    f"file has {file_size:,} bytes, too small to be a fastText .bin model"
                )
            # Copy-on-write: writable (torch warns about read-only arrays), never written back.
            buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        try:
            self._parse(buffer, file_size)
        except BaseException:
            buffer.close()
            raise
        self._mmap = buffer
        self._file_size = file_size
        self._file_identity = _file_identity(stat)

    def _parse(self, buffer: mmap.mmap, file_size: int) -> None:
        header = self._read_header(buffer, file_size)
        words, dictionary_end = self._read_dictionary(buffer, file_size, header)
        rows, matrix_offset = self._read_matrices(buffer, file_size, header, dictionary_end)

        self._version = header.version
        self._dim = header.dim
        self._bucket = header.bucket
        self._minn = header.minn
        self._maxn = header.maxn
        self._words = words
        # Later duplicates win, as in fastText's `Dictionary::load`.
        self._word_to_id: Dict[str, int] = {word: index for index, word in enumerate(words)}
        self._num_rows = rows
        self._matrix_offset = matrix_offset
        # The table as bytes: a uint8 view is valid at any address (see the class docstring).
        byte_array = np.frombuffer(
            buffer, dtype=np.uint8, count=rows * header.dim * 4, offset=matrix_offset
        )
        self._matrix_bytes = torch.from_numpy(byte_array.reshape(rows, header.dim * 4))

    def _read_header(self, buffer: mmap.mmap, file_size: int) -> "_Header":
        """The magic number, the format version, the training args and the dictionary header."""
        magic, version = struct.unpack_from("<ii", buffer, 0)
        if magic != FASTTEXT_MAGIC:
            hint = ""
            if buffer[:1].isdigit():
                hint = (
                    " (it looks like a text .vec file; ELMo-C needs the .bin with n-gram vectors)"
                )
            raise self._error(
                f"not a fastText .bin model: bad magic number {magic} "
                f"(expected {FASTTEXT_MAGIC}){hint}"
            )
        if version not in FASTTEXT_READABLE_VERSIONS:
            raise self._error(
                f"unsupported fastText format version {version} (readable: "
                f"{', '.join(map(str, FASTTEXT_READABLE_VERSIONS))})"
            )
        if file_size < _HEADER_SIZE:
            raise self._error(
                f"truncated: expected at least {_HEADER_SIZE:,} bytes for the header, "
                f"file has {file_size:,}"
            )
        (
            dim,
            _ws,
            _epoch,
            _min_count,
            _neg,
            _word_ngrams,
            _loss,
            model,
            bucket,
            minn,
            maxn,
            _lr_rate,
            _t,
        ) = _ARGS.unpack_from(buffer, 8)
        if model not in _MODEL_NAMES:
            raise self._error(f"corrupt header: unknown model type {model}")
        if model == 3:
            raise self._error(
                "is a supervised (classification) model; ELMo-C needs an unsupervised "
                "(skipgram or cbow) model"
            )
        if dim <= 0 or bucket < 0 or minn < 0 or maxn < 0:
            raise self._error(
                f"corrupt header: dim={dim}, bucket={bucket}, minn={minn}, maxn={maxn}"
            )
        if maxn > 0 and bucket == 0:
            raise self._error(f"corrupt header: maxn={maxn} character n-grams but bucket=0")

        size, nwords, nlabels, _ntokens, pruneidx_size = _DICTIONARY_HEADER.unpack_from(
            buffer, 8 + _ARGS.size
        )
        if size < 0 or nwords < 0 or nlabels < 0 or size != nwords + nlabels:
            raise self._error(
                f"corrupt dictionary header: size={size}, nwords={nwords}, nlabels={nlabels}"
            )
        if nlabels > 0:
            raise self._error(
                f"dictionary has {nlabels:,} labels (entries starting with the label prefix, "
                "'__label__' by default); ELMo-C needs an unsupervised model trained on text "
                "without label tokens"
            )
        if pruneidx_size != -1:
            # Version 11 files have version 12's layout (fastText reads both the same way);
            # any other value here is a quantized model's pruned index, or a misread file.
            older = (
                " (or, in this version-11 file, a dictionary written before fastText added "
                "that field: no current reader reads it correctly)"
                if version == 11
                else ""
            )
            raise self._error(
                f"has a pruned n-gram index (pruneidx_size={pruneidx_size}), which only "
                f"quantized (.ftz) models have{older}; use the full, unquantized .bin"
            )
        return _Header(version, dim, model, bucket, minn, maxn, nwords)

    def _read_dictionary(
        self, buffer: mmap.mmap, file_size: int, header: "_Header"
    ) -> Tuple[List[str], int]:
        """The dictionary's words, in id order, and the offset where the input matrix begins."""
        offset = _HEADER_SIZE
        size = header.nwords
        # Each entry takes at least 10 bytes (NUL, count, type): check before looping.
        if size * 10 > file_size - offset:
            raise self._error(
                f"truncated: the dictionary has {size:,} entries (at least {size * 10:,} bytes), "
                f"file has {file_size - offset:,} bytes after the header"
            )
        words: List[str] = []
        find = buffer.find
        unpack_tail = _ENTRY_TAIL.unpack_from
        for index in range(size):
            end = find(b"\0", offset)
            if end < 0 or end + 1 + _ENTRY_TAIL.size > file_size:
                raise self._error(
                    f"truncated: dictionary entry {index:,} of {size:,} is incomplete"
                )
            word = buffer[offset:end].decode("utf-8", "surrogateescape")
            _count, entry_type = unpack_tail(buffer, end + 1)
            if entry_type != 0:
                raise self._error(
                    f"corrupt dictionary: entry {index:,} ({word!r}) has type {entry_type}, "
                    "expected 0 (word)"
                )
            words.append(word)
            offset = end + 1 + _ENTRY_TAIL.size
        return words, offset

    def _read_matrices(
        self, buffer: mmap.mmap, file_size: int, header: "_Header", offset: int
    ) -> Tuple[int, int]:
        """
        Checks the matrix headers from `offset` (the `quant_input` flag after the dictionary) on
        and that the file holds both matrices; returns the number of rows of the input matrix
        and the offset of its first value.
        """
        if offset + 1 + _MATRIX_HEADER.size > file_size:
            raise self._error("truncated: the input matrix header is missing")
        quant_input = buffer[offset]
        if quant_input == 1:
            raise self._error(
                "is a quantized model (.ftz); ELMo-C needs the full, unquantized .bin"
            )
        if quant_input != 0:
            raise self._error(f"corrupt file: quant_input flag is {quant_input}, expected 0 or 1")
        rows, cols = _MATRIX_HEADER.unpack_from(buffer, offset + 1)
        offset += 1 + _MATRIX_HEADER.size
        dim, nwords, bucket = header.dim, header.nwords, header.bucket
        if cols != dim or rows != nwords + bucket:
            raise self._error(
                f"corrupt file: the input matrix is {rows:,} x {cols:,}, expected "
                f"{nwords + bucket:,} x {dim:,} (nwords + bucket x dim)"
            )
        matrix_bytes = rows * cols * 4
        if file_size - offset < matrix_bytes:
            raise self._error(
                f"truncated: expected {matrix_bytes:,} bytes for the input matrix, file has "
                f"{file_size - offset:,}"
            )
        # The output matrix is not used, but a file cut short there is still a broken download.
        output_offset = offset + matrix_bytes
        if output_offset + 1 + _MATRIX_HEADER.size > file_size:
            raise self._error("truncated: the output matrix header is missing")
        output_rows, output_cols = _MATRIX_HEADER.unpack_from(buffer, output_offset + 1)
        if buffer[output_offset] != 0 or output_cols != dim or output_rows < 0:
            raise self._error("corrupt file: unexpected output matrix header")
        output_bytes = output_rows * output_cols * 4
        available = file_size - output_offset - 1 - _MATRIX_HEADER.size
        if available < output_bytes:
            raise self._error(
                f"truncated: expected {output_bytes:,} bytes for the output matrix, file has "
                f"{available:,}"
            )
        return rows, offset

    # ------------------------------------------------------------------ construction and caching

    @classmethod
    def from_path(cls, path: Union[str, os.PathLike]) -> "FastTextVectors":
        """
        Returns the `FastTextVectors` of `path`, loading it only once per process for a given
        (resolved path, device, inode, size, modification time): a file replaced on disk is
        reloaded.
        """
        resolved = Path(path).expanduser().resolve()
        try:
            stat = resolved.stat()
        except OSError:
            return cls(resolved)  # raises the FastTextFormatError naming the problem
        key = (str(resolved),) + _file_identity(stat)
        with _CACHE_LOCK:
            vectors = _CACHE.get(key)
            if vectors is None:
                vectors = cls(resolved)
                # Drop the instance of an older version of the same file.
                for stale in [k for k in _CACHE if k[0] == key[0]]:
                    del _CACHE[stale]
                _CACHE[key] = vectors
        return vectors

    def __reduce__(self):
        # Pickle (and deepcopy) by path: never copy the table, re-share it on the other side.
        return (FastTextVectors.from_path, (str(self._path.absolute()),))

    def __repr__(self) -> str:
        return (
            f"FastTextVectors({str(self._path)!r}, dim={self._dim}, num_words={len(self._words)}, "
            f"bucket={self._bucket}, minn={self._minn}, maxn={self._maxn})"
        )

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> Path:
        return self._path

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def num_words(self) -> int:
        return len(self._words)

    @property
    def bucket(self) -> int:
        return self._bucket

    @property
    def minn(self) -> int:
        return self._minn

    @property
    def maxn(self) -> int:
        return self._maxn

    @property
    def num_rows(self) -> int:
        """Rows of the input matrix: `num_words + bucket`."""
        return self._num_rows

    @property
    def words(self) -> List[str]:
        """The dictionary, in id order (the list itself: do not modify it)."""
        return self._words

    @property
    def input_matrix(self) -> torch.Tensor:
        """
        The input matrix as a CPU `float32` tensor of shape `(num_rows, dim)`: a zero-copy
        memory-mapped view if the matrix is 4-byte aligned in the file, otherwise an in-memory
        copy made (with a warning) on first access. Prefer `rows()`, which never copies the table
        and checks the values it reads (this view is not checked).
        """
        if self._input_matrix is None:
            if self._matrix_offset % 4 == 0:
                array = np.frombuffer(
                    self._mmap,
                    dtype=np.float32,
                    count=self._num_rows * self._dim,
                    offset=self._matrix_offset,
                )
                self._input_matrix = torch.from_numpy(array.reshape(self._num_rows, self._dim))
            else:
                logger.warning(
                    "The input matrix of %s is not 4-byte aligned in the file; copying it "
                    "(%.1f MB) into memory. FastTextVectors.rows() reads rows without a copy.",
                    self._path,
                    self._matrix_bytes.numel() / 1e6,
                )
                self._input_matrix = self._matrix_bytes.clone().view(torch.float32)
        return self._input_matrix

    # ------------------------------------------------------------------ lookups

    def word_id(self, word: str) -> int:
        """The dictionary id of `word`, or -1 if it is not in the dictionary."""
        return self._word_to_id.get(word, -1)

    def subword_ids(self, word: str) -> List[int]:
        """
        The input-matrix rows that make up `word`'s vector, exactly as fastText's
        `get_subwords(word)[1]`: the word's own id if it is in the dictionary, then the ids of its
        hashed character n-grams (none for the EOS word `</s>`, none when `maxn == 0`).
        """
        return list(self._cached_subword_ids(word))

    def subword_ids_tuple(self, word: str) -> Tuple[int, ...]:
        """`subword_ids` as the cached (immutable) tuple, without a copy."""
        return self._cached_subword_ids(word)

    def _compute_subword_ids(self, word: str) -> Tuple[int, ...]:
        ids: List[int] = []
        word_id = self._word_to_id.get(word, -1)
        if word_id >= 0:
            ids.append(word_id)
        if self._maxn > 0 and word != self.eos_word:
            ids.extend(self._ngram_ids(b"<" + _encode(word) + b">"))
        return tuple(ids)

    def _ngram_ids(self, text: bytes) -> List[int]:
        # fastText's `computeSubwords`: n-grams of n = minn..maxn UTF-8 characters (a character is
        # a lead byte and its 0b10xxxxxx continuation bytes), except the 1-grams "<" and ">".
        length = len(text)
        starts = [i for i in range(length) if text[i] & 0xC0 != 0x80]
        starts.append(length)
        minn, maxn, bucket, nwords = self._minn, self._maxn, self._bucket, len(self._words)
        ids = []
        for k in range(len(starts) - 1):
            h = _FNV_OFFSET
            position = starts[k]
            for n in range(1, min(maxn, len(starts) - 1 - k) + 1):
                end = starts[k + n]
                for byte in text[position:end]:
                    h = ((h ^ _SIGNED_BYTE[byte]) * _FNV_PRIME) & 0xFFFFFFFF
                position = end
                if n >= minn and not (n == 1 and (k == 0 or end == length)):
                    ids.append(nwords + h % bucket)
        return ids

    def rows(
        self,
        ids: Union[torch.Tensor, Sequence[int], np.ndarray],
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """
        Rows `ids` of the input matrix as a CPU `float32` tensor of shape `(len(ids), dim)`
        (written into `out` if given). Reads only those rows of the memory map, whatever the
        file's alignment. A row holding NaN, inf or a value of magnitude `MAX_ABS_VALUE` or more
        raises `FastTextFormatError` naming the file, the row and its word (or n-gram bucket).
        """
        index = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64)
        index = index.reshape(-1)
        if out is None:
            out = torch.empty(len(index), self._dim, dtype=torch.float32)
        elif out.shape != (len(index), self._dim) or out.dtype != torch.float32:
            raise ValueError(
                f"out has shape {tuple(out.shape)}, expected {(len(index), self._dim)}"
            )
        if len(index) and (index.min() < 0 or index.max() >= self._num_rows):
            bad = index.min() if index.min() < 0 else index.max()
            raise IndexError(
                f"row {bad} is out of range for {self._num_rows:,} rows of {self._path}"
            )
        # numpy copies whole rows (a memcpy each); "clip" skips its buffered bounds check.
        np.take(
            self._matrix_bytes.numpy(), index, axis=0, out=out.numpy().view(np.uint8), mode="clip"
        )
        self._check_finite(out, index)
        return out

    def _check_finite(self, values: torch.Tensor, index: np.ndarray) -> None:
        # One pass over the gathered rows (NaN fails both comparisons); the exact search only
        # runs when something is wrong.
        if values.numel() == 0:
            return
        low, high = torch.aminmax(values)
        if -MAX_ABS_VALUE < float(low) and float(high) < MAX_ABS_VALUE:
            return
        bad_values = ~(values.abs() < MAX_ABS_VALUE)
        bad = bad_values.any(dim=1)
        rows = np.unique(index[bad.numpy()])
        first = int(bad.nonzero()[0, 0])
        row = int(index[first])
        value = values[first][bad_values[first]][0].item()
        more = f" (and {len(rows) - 1:,} more of the rows read)" if len(rows) > 1 else ""
        raise self._error(
            f"row {row:,} of the input matrix, {self.describe_row(row)}, holds {value:g}{more}: "
            f"NaN, inf or a magnitude of {MAX_ABS_VALUE:g} or more, which no trained vector has. "
            "The file is corrupt or the model diverged in training; such vectors would silently "
            "turn the representations that use them into NaN"
        )

    def describe_row(self, row: int) -> str:
        """What input-matrix row `row` is: a word's vector or a character n-gram bucket."""
        if 0 <= row < len(self._words):
            return f"the vector of the word {self._words[row]!r}"
        return f"character n-gram bucket {row - len(self._words):,}"

    # ------------------------------------------------------------------ integrity

    def check_unchanged(self) -> None:
        """
        Raises `FastTextFormatError` if the file at `path` is no longer the one that was opened:
        replaced, rewritten, truncated or deleted (its device, inode, size or modification time
        differ). The table is memory-mapped, so a file rewritten in place changes the vectors
        under a running process, and reading a page that truncation cut off kills the process
        with SIGBUS. Costs one `stat` call; the `fasttext` token embedder calls it before every
        lookup.
        """
        try:
            identity = _file_identity(os.stat(self._absolute_path))
        except OSError as error:
            raise self._error(
                f"was opened by this process but cannot be found any more ({error.strerror}): "
                "it was moved or deleted while in use. Keep the .bin a run was started with in "
                "place until the run ends."
            ) from None
        if identity != self._file_identity:
            _, _, old_size, old_mtime = self._file_identity
            _, _, new_size, new_mtime = identity
            later = (new_mtime - old_mtime) / 1e9
            raise self._error(
                f"changed on disk while in use (size {old_size:,} -> {new_size:,} bytes, "
                f"modified {later:+.1f} s later, or replaced by another file): the vectors "
                "read from now on would not be those the run started with. Never replace or "
                "rewrite a .bin a run is using; restart from the last checkpoint with the "
                "original file."
            )

    @property
    def fingerprint(self) -> str:
        """
        A short identity of the model's content, `"2:<file size>:<hash>"`: a 128-bit BLAKE2b hash
        of the header and the whole dictionary (args, words, counts) and of
        `fingerprint_samples` blocks of `fingerprint_block_bytes`, half spread evenly over the
        word rows and half over the n-gram rows (the first and last of each included). Two
        copies of one file have the same fingerprint; another model practically never has. It
        detects another model, not a forgery made to keep the sampled blocks. Reads a few MB
        whatever the file's size; computed once per instance.
        """
        if self._fingerprint is None:
            words_end = self._matrix_offset + self.num_words * self.dim * 4
            rows_end = self._matrix_offset + self.num_rows * self.dim * 4
            regions = [(self._matrix_offset, words_end), (words_end, rows_end)]
            self._fingerprint = "2:" + self._sampled_digest(regions)
        return self._fingerprint

    def matches_fingerprint(self, recorded: str) -> bool:
        """Whether `recorded` (this version's `fingerprint`, or the first version's, which
        sampled the two matrices as one region) is this model's."""
        if recorded.startswith("2:"):
            return recorded == self.fingerprint
        return recorded == self._sampled_digest([(self._matrix_offset, self._file_size)])

    def _sampled_digest(self, regions: List[Tuple[int, int]]) -> str:
        digest = hashlib.blake2b(digest_size=16)
        samples = max(2, self.fingerprint_samples // len(regions))
        with memoryview(self._mmap) as view:
            digest.update(view[: self._matrix_offset])
            for start, end in regions:
                block = min(self.fingerprint_block_bytes, end - start)
                for sample in range(samples):
                    offset = start + (end - start - block) * sample // (samples - 1)
                    digest.update(view[offset : offset + block])
        return f"{self._file_size}:{digest.hexdigest()}"

    def word_vector(self, word: str) -> np.ndarray:
        """
        `word`'s vector, as fastText's `get_word_vector`: the mean of its `subword_ids` rows
        (zeros if it has none).
        """
        ids = self._cached_subword_ids(word)
        if not ids:
            return np.zeros(self._dim, dtype=np.float32)
        return self.rows(ids).sum(0).mul_(1.0 / len(ids)).numpy()


_CACHE: Dict[Tuple[str, int, int, int, int], FastTextVectors] = {}
_CACHE_LOCK = threading.Lock()


def clear_fasttext_cache() -> None:
    """Forgets the models loaded by `FastTextVectors.from_path` (their maps close once unused)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def write_fasttext_bin(
    path: Union[str, os.PathLike],
    words: Sequence[str],
    input_matrix: np.ndarray,
    *,
    minn: int,
    maxn: int,
    bucket: int,
    counts: Optional[Sequence[int]] = None,
    model: str = "skipgram",
) -> Path:
    """
    Writes an unsupervised fastText `.bin` model (format version 12) from a dictionary and an
    input matrix, e.g. for deterministic test fixtures or synthetic benchmarks. The `fasttext`
    library loads the result. The output matrix is written as zeros. The file is written to a
    temporary name and renamed into place.

    # Parameters

    path : `Union[str, os.PathLike]`
        Where to write the model.
    words : `Sequence[str]`
        The dictionary, in id order (distinct, no NUL characters; fastText's own models put the
        EOS word `</s>` in it).
    input_matrix : `np.ndarray`
        Shape `(len(words) + bucket, dim)`: word rows, then n-gram bucket rows.
    minn, maxn, bucket : `int`
        Character n-gram lengths and number of hash buckets (`maxn = 0`: no n-grams).
    counts : `Sequence[int]`, optional
        Word frequencies (default: all 1).
    model : `str`, optional (default=`"skipgram"`)
        `"skipgram"` or `"cbow"`.
    """
    path = Path(path)
    matrix = np.ascontiguousarray(input_matrix, dtype="<f4")
    if matrix.ndim != 2 or matrix.shape[0] != len(words) + bucket:
        raise ConfigurationError(
            f"input_matrix has shape {matrix.shape}, expected ({len(words) + bucket}, dim)"
        )
    if len(set(words)) != len(words) or any("\0" in word for word in words):
        raise ConfigurationError("words must be distinct and contain no NUL characters")
    if maxn > 0 and bucket <= 0:
        raise ConfigurationError("character n-grams (maxn > 0) need bucket > 0")
    model_ids = {name: index for index, name in _MODEL_NAMES.items() if name != "supervised"}
    if model not in model_ids:
        raise ConfigurationError(f"model must be one of {sorted(model_ids)}, got {model!r}")
    counts = [1] * len(words) if counts is None else list(counts)
    if len(counts) != len(words):
        raise ConfigurationError(f"{len(counts)} counts for {len(words)} words")
    dim = matrix.shape[1]
    # Args: dim, ws, epoch, minCount, neg, wordNgrams, loss (2 = negative sampling), model,
    # bucket, minn, maxn, lrUpdateRate, t.
    args = (dim, 5, 5, 1, 5, 1, 2, model_ids[model], bucket, minn, maxn, 100, 1e-4)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "wb") as out:
        out.write(struct.pack("<ii", FASTTEXT_MAGIC, FASTTEXT_VERSION))
        out.write(_ARGS.pack(*args))
        out.write(_DICTIONARY_HEADER.pack(len(words), len(words), 0, sum(counts), -1))
        for word, count in zip(words, counts):
            out.write(_encode(word) + b"\0" + _ENTRY_TAIL.pack(count, 0))
        out.write(b"\0" + _MATRIX_HEADER.pack(*matrix.shape))
        out.write(memoryview(matrix).cast("B"))
        out.write(b"\0" + _MATRIX_HEADER.pack(len(words), dim))
        zeros = bytes(min(len(words), 65536) * dim * 4)
        for start in range(0, len(words), 65536):
            out.write(zeros[: (min(len(words), start + 65536) - start) * dim * 4])
    return path


def no_vector_id(vectors: FastTextVectors) -> int:
    """
    The index the `elmoc_fasttext_subwords` indexer reserves for a token with no fastText rows (it
    embeds to a zero vector). Indices are rows + 1, with 0 for padding.
    """
    return vectors.num_rows + 1
