"""A pure-Python reader of fastText `.bin` models' vectors (the file: `fasttext_bin.py`)."""

import logging
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from elmoc_allennlp.fasttext.bin_file import MAX_ABS_VALUE, FastTextBinFile, _file_identity

# Importable from here too (benchmarks/common.py writes test models with the format's constants).
from elmoc_allennlp.fasttext.bin_file import (
    _ARGS,
    _DICTIONARY_HEADER,
    _ENTRY_TAIL,
    _MATRIX_HEADER,
)  # noqa: F401
from elmoc_allennlp.fasttext.bin_file import (
    FASTTEXT_MAGIC,
    FASTTEXT_VERSION,
    FastTextFormatError,
)  # noqa: F401

logger = logging.getLogger(__name__)

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619
# fastText XORs each byte as a sign-extended `int8_t`: the value XORed for each byte.
_SIGNED_BYTE = tuple(b if b < 0x80 else b | 0xFFFFFF00 for b in range(256))


def fasttext_hash(data: bytes) -> int:
    """fastText's 32-bit FNV-1a hash of a UTF-8 byte string (with its signed-byte quirk)."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ _SIGNED_BYTE[byte]) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def _encode(word: str) -> bytes:
    # Dictionary words are decoded with `surrogateescape`, so invalid UTF-8 round-trips.
    try:
        return word.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return word.encode("utf-8", "surrogatepass")


# A dictionary with fewer words that have cased letters is too small to tell a lowercased model from a cased one.
MIN_WORDS_FOR_CASE = 100


@dataclass(frozen=True)
class DictionaryCase:
    """
    Whether a fastText model was trained on lowercased text, decided from its dictionary.

    # Parameters

    words : `int`
        The dictionary's words with a letter that has case (`"the"`, `"The"`; not `"1990"`).
    cased_words : `int`
        Of them, the words with an uppercase letter.
    """

    words: int
    cased_words: int

    @property
    def lowercased(self) -> Optional[bool]:
        """`True`: no uppercase letter in a non-trivial dictionary; `False`: some; `None`: too few
        words to tell."""
        if self.cased_words:
            return False
        return True if self.words >= MIN_WORDS_FOR_CASE else None

    def summary(self) -> str:
        if self.lowercased is None:
            return (
                f"of unknown case (only {self.words:,} words with cased letters, "
                f"{MIN_WORDS_FOR_CASE} needed to tell)"
            )
        if self.lowercased:
            return f"trained on lowercased text (none of its {self.words:,} words has an uppercase letter)"
        return f"trained on cased text ({self.cased_words / self.words:.1%} of its {self.words:,} words are cased)"


def dictionary_case(words: Iterable[str]) -> DictionaryCase:
    """How many of `words` have a cased letter, and how many of those an uppercase one."""
    words_with_case = cased = 0
    for word in words:
        lowered = word.lower()
        if lowered != word:
            cased += 1
            words_with_case += 1
        elif lowered != word.upper():
            words_with_case += 1
    return DictionaryCase(words_with_case, cased)


class FastTextVectors(FastTextBinFile):
    """
    The word and character n-gram vectors of a fastText `.bin`, loaded once per process by `from_path`;
    `rows()` refuses NaN, inf and magnitudes of `MAX_ABS_VALUE` or more.

    # Parameters

    path : `Union[str, os.PathLike]`
        A fastText `.bin` file (not the text `.vec` file: it has no n-gram vectors).
    """

    eos_word = "</s>"
    # Entries kept by the `subword_ids` LRU cache (words are Zipfian: this covers most tokens).
    subword_cache_size = 2**15

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        super().__init__(path)
        self._input_matrix: Optional[torch.Tensor] = None
        self._case: Optional[DictionaryCase] = None
        self._cached_subword_ids = lru_cache(maxsize=self.subword_cache_size)(
            self._compute_subword_ids
        )

    @classmethod
    def from_path(cls, path: Union[str, os.PathLike]) -> "FastTextVectors":
        """`path`'s vectors, loaded once per process (again if the file was replaced)."""
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
                for stale in [k for k in _CACHE if k[0] == key[0]]:
                    del _CACHE[stale]
                _CACHE[key] = vectors
        return vectors

    def __reduce__(self):
        # Pickle (and deepcopy) by path: never copy the table, re-share it on the other side.
        return (FastTextVectors.from_path, (str(self.path.absolute()),))

    def __repr__(self) -> str:
        return (
            f"FastTextVectors({str(self.path)!r}, dim={self.dim}, num_words={self.num_words}, "
            f"bucket={self.bucket}, minn={self.minn}, maxn={self.maxn})"
        )

    @property
    def case(self) -> DictionaryCase:
        """Whether the model was trained on lowercased text, measured once per loaded file."""
        if self._case is None:
            self._case = dictionary_case([word for word in self.words if word != self.eos_word])
        return self._case

    @property
    def input_matrix(self) -> torch.Tensor:
        """The unchecked input matrix: a view if 4-byte aligned, else a copy. Prefer `rows()`."""
        if self._input_matrix is None:
            matrix = self._matrix_bytes
            if self._matrix_offset % 4:
                logger.warning("Copying the misaligned input matrix of %s into memory", self.path)
                matrix = matrix.clone()
            self._input_matrix = matrix.view(torch.float32)
        return self._input_matrix

    def word_id(self, word: str) -> int:
        """The dictionary id of `word`, or -1 if it is not in the dictionary."""
        return self._word_to_id.get(word, -1)

    def subword_ids(self, word: str) -> List[int]:
        """The rows whose mean is `word`'s vector, as fastText's `get_subwords(word)[1]`."""
        return list(self._cached_subword_ids(word))

    def subword_ids_tuple(self, word: str) -> Tuple[int, ...]:
        """`subword_ids` as the cached tuple, without a copy."""
        return self._cached_subword_ids(word)

    def _compute_subword_ids(self, word: str) -> Tuple[int, ...]:
        word_id = self.word_id(word)
        ids = [word_id] if word_id >= 0 else []
        if self.maxn > 0 and word != self.eos_word:
            ids.extend(self._ngram_ids(b"<" + _encode(word) + b">"))
        return tuple(ids)

    def _ngram_ids(self, text: bytes) -> List[int]:
        # fastText's `computeSubwords`: n-grams of minn..maxn UTF-8 characters, but not "<" and ">".
        length = len(text)
        starts = [i for i in range(length) if text[i] & 0xC0 != 0x80]
        starts.append(length)
        ids = []
        for k in range(len(starts) - 1):
            h = _FNV_OFFSET
            position = starts[k]
            for n in range(1, min(self.maxn, len(starts) - 1 - k) + 1):
                end = starts[k + n]
                for byte in text[position:end]:
                    h = ((h ^ _SIGNED_BYTE[byte]) * _FNV_PRIME) & 0xFFFFFFFF
                position = end
                if n >= self.minn and not (n == 1 and (k == 0 or end == length)):
                    ids.append(self.num_words + h % self.bucket)
        return ids

    def rows(
        self,
        ids: Union[torch.Tensor, Sequence[int], np.ndarray],
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Rows `ids`, `(len(ids), dim)` (into `out`); a `FastTextFormatError` on NaN, inf or huge values."""
        index = np.asarray(
            ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64
        ).reshape(-1)
        if out is None:
            out = torch.empty(len(index), self.dim, dtype=torch.float32)
        elif out.shape != (len(index), self.dim) or out.dtype != torch.float32:
            raise ValueError(f"out has shape {tuple(out.shape)}, expected {(len(index), self.dim)}")
        if len(index) and (index.min() < 0 or index.max() >= self.num_rows):
            bad = index.min() if index.min() < 0 else index.max()
            raise IndexError(f"row {bad} is out of range for {self.num_rows:,} rows of {self.path}")
        # numpy copies whole rows (a memcpy each); "clip" skips its buffered bounds check.
        np.take(
            self._matrix_bytes.numpy(), index, axis=0, out=out.numpy().view(np.uint8), mode="clip"
        )
        self._check_finite(out, index)
        return out

    def _check_finite(self, values: torch.Tensor, index: np.ndarray) -> None:
        # One pass (NaN fails both comparisons); the search only runs when something is wrong.
        if values.numel() == 0:
            return
        low, high = torch.aminmax(values)
        if -MAX_ABS_VALUE < float(low) and float(high) < MAX_ABS_VALUE:
            return
        bad_values = ~(values.abs() < MAX_ABS_VALUE)
        first = int(bad_values.any(dim=1).nonzero()[0, 0])
        row = int(index[first])
        value = values[first][bad_values[first]][0].item()
        if row < self.num_words:
            what = f"the vector of the word {self.words[row]!r}"
        else:
            what = f"character n-gram bucket {row - self.num_words:,}"
        raise self._error(
            f"row {row:,} of the input matrix, {what}, holds {value:g}: NaN, inf or a magnitude of "
            f"{MAX_ABS_VALUE:g} or more (a corrupt file or a diverged model)"
        )

    def word_vector(self, word: str) -> np.ndarray:
        """`word`'s vector, as fastText's `get_word_vector`: the mean of its rows (or zeros)."""
        ids = self._cached_subword_ids(word)
        if not ids:
            return np.zeros(self.dim, dtype=np.float32)
        return self.rows(ids).sum(0).mul_(1.0 / len(ids)).numpy()


_CACHE: Dict[Tuple[str, int, int, int, int], FastTextVectors] = {}
_CACHE_LOCK = threading.Lock()


def clear_fasttext_cache() -> None:
    """Forgets the models loaded by `FastTextVectors.from_path` (their maps close once unused)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def no_vector_id(vectors: FastTextVectors) -> int:
    """The indexer's id of a token without rows (ids are rows + 1, 0 padding), embedded as zeros."""
    return vectors.num_rows + 1


def mean_subword_vectors(vectors: FastTextVectors, subword_ids: torch.Tensor) -> torch.Tensor:
    """`(..., dim)`: the mean of each token's rows, for indexer ids `(..., num_subwords)` (rows + 1)."""
    flat = subword_ids.cpu().reshape(-1, subword_ids.size(-1)).numpy()
    valid = (flat > 0) & (flat <= vectors.num_rows)
    # numpy's unique is single-threaded: torch's stalls on a busy machine.
    needed, inverse = np.unique(flat[valid] - 1, return_inverse=True)
    table = torch.zeros(len(needed) + 1, vectors.dim)
    vectors.rows(needed, out=table[:-1])
    local = np.full(flat.shape, len(needed), dtype=np.int64)
    local[valid] = inverse.reshape(-1)
    weights = torch.from_numpy(valid / valid.sum(-1, keepdims=True).clip(min=1)).float()
    embedded = torch.nn.functional.embedding_bag(
        torch.from_numpy(local), table, mode="sum", per_sample_weights=weights
    )
    return embedded.view(*subword_ids.shape[:-1], vectors.dim)
