"""A fastText `.bin` file (format 11 or 12) read without the fastText library."""

import hashlib
import mmap
import os
import struct
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from allennlp.common.checks import ConfigurationError

FASTTEXT_MAGIC = 793712314
FASTTEXT_VERSION = 12
FASTTEXT_READABLE_VERSIONS = (11, 12)
# Trained vectors are of order 1; rows with NaN, inf or a magnitude this large are refused.
MAX_ABS_VALUE = 1e6

# The 12 int32 args and the float64 `t`.
_ARGS = struct.Struct("<12id")
_DICTIONARY_HEADER = struct.Struct("<iiiqq")
_ENTRY_TAIL = struct.Struct("<qb")
_MATRIX_HEADER = struct.Struct("<qq")
_HEADER_SIZE = 8 + _ARGS.size + _DICTIONARY_HEADER.size


def _file_identity(stat: os.stat_result) -> Tuple[int, int, int, int]:
    """What changes when a file is replaced or rewritten: device, inode, size, mtime."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


class FastTextFormatError(ConfigurationError):
    """A fastText `.bin` that is missing, malformed or of a kind ELMo-C cannot use."""


class FastTextBinFile:
    """
    A fastText `.bin`, its header, dictionary and matrices checked (models with labels, quantized and
    pruned ones refused) and mapped copy-on-write; its identity (`check_unchanged`, `fingerprint`).

    # Parameters

    path : `Union[str, os.PathLike]`
        A fastText `.bin` file (not the text `.vec` file: it has no n-gram vectors).
    """

    # How much of the matrices `fingerprint` hashes (4 MB).
    fingerprint_samples = 64
    fingerprint_block_bytes = 1 << 16

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self.path = Path(path).expanduser()
        self._mmap: Optional[mmap.mmap] = None
        self._fingerprint: Optional[str] = None
        if not self.path.exists():
            raise self._error("file not found")
        if self.path.is_dir():
            raise self._error("is a directory, not a .bin file")
        if not self.path.is_file():  # a FIFO or a device: opening it could block forever
            raise self._error("is not a regular file")
        try:
            handle = open(self.path, "rb")
        except OSError as error:
            raise self._error(f"cannot open ({error})") from error
        with handle:
            stat = os.fstat(handle.fileno())
            if stat.st_size < 8:
                raise self._error(f"file has {stat.st_size:,} bytes, too small to be a .bin")
            # Copy-on-write: writable (torch warns about read-only arrays), never written back.
            buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        try:
            self._parse(buffer, stat.st_size)
        except BaseException:
            buffer.close()
            raise
        self._mmap, self._file_size, self._file_identity = (
            buffer,
            stat.st_size,
            _file_identity(stat),
        )

    def _error(self, problem: str) -> FastTextFormatError:
        return FastTextFormatError(f"fastText model {self.path}: {problem}")

    def _parse(self, buffer: mmap.mmap, file_size: int) -> None:
        self.num_words = self._read_header(buffer, file_size)
        # The dictionary in id order (do not modify it); later duplicates win, as in fastText.
        self.words, dictionary_end = self._read_dictionary(buffer, file_size, self.num_words)
        self._word_to_id: Dict[str, int] = {word: index for index, word in enumerate(self.words)}
        self.num_rows = self.num_words + self.bucket
        self._matrix_offset = self._read_matrices(buffer, file_size, dictionary_end)
        # The table as bytes: a uint8 view is valid at any address.
        values = np.frombuffer(
            buffer, dtype=np.uint8, count=self.num_rows * self.dim * 4, offset=self._matrix_offset
        )
        self._matrix_bytes = torch.from_numpy(values.reshape(self.num_rows, self.dim * 4))

    def _read_header(self, buffer: mmap.mmap, file_size: int) -> int:
        """Checks the header and sets `dim`, `bucket`, `minn` and `maxn`; returns `nwords`."""
        magic, version = struct.unpack_from("<ii", buffer, 0)
        if magic != FASTTEXT_MAGIC:
            vec = " (it looks like a text .vec file; use the .bin)" if buffer[:1].isdigit() else ""
            raise self._error(f"bad magic number {magic} (expected {FASTTEXT_MAGIC}){vec}")
        if version not in FASTTEXT_READABLE_VERSIONS:
            raise self._error(f"unsupported fastText format version {version} (readable: 11, 12)")
        if file_size < _HEADER_SIZE:
            raise self._error(
                f"truncated: the header needs {_HEADER_SIZE:,} bytes, file has {file_size:,}"
            )
        args = _ARGS.unpack_from(buffer, 8)
        dim, model, bucket, minn, maxn = args[0], args[7], args[8], args[9], args[10]
        if model not in (1, 2, 3):
            raise self._error(f"corrupt header: unknown model type {model}")
        if model == 3:
            raise self._error("is a supervised (classification) model, not skipgram or cbow")
        if dim <= 0 or bucket < 0 or minn < 0 or maxn < 0:
            raise self._error(f"corrupt header: dim={dim} bucket={bucket} minn={minn} maxn={maxn}")
        if maxn > 0 and bucket == 0:
            raise self._error(f"corrupt header: maxn={maxn} character n-grams but bucket=0")
        dictionary_header = _DICTIONARY_HEADER.unpack_from(buffer, 8 + _ARGS.size)
        size, nwords, nlabels, _ntokens, pruneidx_size = dictionary_header
        if size < 0 or nwords < 0 or nlabels < 0 or size != nwords + nlabels:
            raise self._error(
                f"corrupt dictionary header: size={size}, nwords={nwords}, nlabels={nlabels}"
            )
        if nlabels > 0:
            raise self._error(f"dictionary has {nlabels:,} labels ('__label__' tokens); use none")
        if pruneidx_size != -1:
            raise self._error(
                f"has a pruned n-gram index (pruneidx_size={pruneidx_size}) of a quantized model"
            )
        self.dim, self.bucket, self.minn, self.maxn = dim, bucket, minn, maxn
        return nwords

    def _read_dictionary(
        self, buffer: mmap.mmap, file_size: int, size: int
    ) -> Tuple[List[str], int]:
        """The words, in id order, and the offset after the dictionary."""
        offset = _HEADER_SIZE
        # Each entry takes at least 10 bytes (NUL, count, type): check before looping.
        if size * 10 > file_size - offset:
            raise self._error(f"truncated: the dictionary has {size:,} entries")
        words: List[str] = []
        for index in range(size):
            end = buffer.find(b"\0", offset)
            if end < 0 or end + 1 + _ENTRY_TAIL.size > file_size:
                raise self._error(f"truncated: dictionary entry {index} of {size} is incomplete")
            word = buffer[offset:end].decode("utf-8", "surrogateescape")
            _count, entry_type = _ENTRY_TAIL.unpack_from(buffer, end + 1)
            if entry_type != 0:
                raise self._error(f"corrupt dictionary: entry {index:,} ({word!r}) is not a word")
            words.append(word)
            offset = end + 1 + _ENTRY_TAIL.size
        return words, offset

    def _read_matrices(self, buffer: mmap.mmap, file_size: int, offset: int) -> int:
        """Checks both matrices from `offset` on; returns where the input matrix values begin."""
        if offset + 1 + _MATRIX_HEADER.size > file_size:
            raise self._error("truncated: the input matrix header is missing")
        if buffer[offset] == 1:
            raise self._error("is a quantized model (.ftz); ELMo-C needs the full .bin")
        if buffer[offset] != 0:
            raise self._error(f"corrupt file: quant_input flag is {buffer[offset]}")
        rows, cols = _MATRIX_HEADER.unpack_from(buffer, offset + 1)
        offset += 1 + _MATRIX_HEADER.size
        if cols != self.dim or rows != self.num_rows:
            raise self._error(
                f"corrupt file: the input matrix is {rows:,} x {cols:,}, expected {self.num_rows:,} x {self.dim:,}"
            )
        self._check_size("input matrix", rows * cols * 4, file_size - offset)
        # The output matrix is not used, but a file cut short there is still a broken download.
        output_offset = offset + rows * cols * 4
        if output_offset + 1 + _MATRIX_HEADER.size > file_size:
            raise self._error("truncated: the output matrix header is missing")
        output_rows, output_cols = _MATRIX_HEADER.unpack_from(buffer, output_offset + 1)
        if buffer[output_offset] != 0 or output_cols != self.dim or output_rows < 0:
            raise self._error("corrupt file: unexpected output matrix header")
        available = file_size - output_offset - 1 - _MATRIX_HEADER.size
        self._check_size("output matrix", output_rows * output_cols * 4, available)
        return offset

    def _check_size(self, what: str, needed: int, available: int) -> None:
        if available < needed:
            raise self._error(
                f"truncated: expected {needed:,} bytes for the {what}, file has {available:,}"
            )

    def check_unchanged(self) -> None:
        """A `FastTextFormatError` if the file changed since it was opened (one `stat`)."""
        try:
            identity = _file_identity(os.stat(self.path.absolute()))
        except OSError as error:
            raise self._error(f"cannot be found any more ({error.strerror})") from None
        if identity != self._file_identity:
            raise self._error(
                f"changed on disk while in use (size {self._file_identity[2]:,} -> "
                f"{identity[2]:,} bytes); restart with the original file"
            )

    @property
    def fingerprint(self) -> str:
        """`"2:<file size>:<hash>"`: BLAKE2b of the header, dictionary and sampled rows (not forgery-proof)."""
        if self._fingerprint is None:
            words_end = self._matrix_offset + self.num_words * self.dim * 4
            rows_end = self._matrix_offset + self.num_rows * self.dim * 4
            self._fingerprint = "2:" + self._sampled_digest(
                [(self._matrix_offset, words_end), (words_end, rows_end)]
            )
        return self._fingerprint

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
