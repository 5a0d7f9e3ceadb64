"""
Whether fastText vectors can serve as an ELMo-C biLM's targets: measured where `elmoc-fasttext`
writes them and where the biLM is built on them.

Too few training passes over a small corpus leave fastText's word vectors close to one shared
direction (mean pairwise cosine 0.96 on a 211k-token corpus at 5 epochs; healthy vectors of PTB
0.3, `docs/pretraining.md#fasttext-vectors-on-your-own-corpus`). A continuous-output biLM then
reaches a tiny cosine loss by predicting that direction, and looks excellent while it has learned
nothing.
"""
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError
from allennlp.nn import util
from allennlp.training.metrics import Metric

from elmoc_allennlp.common.fasttext_vectors import FastTextVectors

logger = logging.getLogger(__name__)

# The most frequent words measured (fastText's dictionary is sorted by count, most frequent first).
FREQUENT_WORDS = 2000
# Mean pairwise cosine of the frequent words' vectors at or above which vectors are degenerate.
# Measured (benchmarks/fasttext_epochs.py, docs/pretraining.md): vectors of 100k to 887k PTB
# tokens measure 0.19-0.26 with the default epochs and 0.997 and 0.907 at 5 epochs of 100k and
# 200k tokens (0.960 for the 211k corpus of the issue); 0.49-0.51 only at half the default passes.
DEGENERATE_MEAN_COSINE = 0.5
# A nearest neighbour this close is a copy in all but rounding: "bank"'s neighbours in the
# degenerate vectors of the issue were at 0.9999; measured, 99.9% of the words of 100k PTB tokens
# at 5 epochs have one, 0.0% of the healthy vectors' (benchmarks/fasttext_epochs.py).
NEAR_DUPLICATE_COSINE = 0.999
# Degenerate too when this fraction of the frequent words has a near-duplicate neighbour.
DEGENERATE_NEAR_DUPLICATES = 0.5
# Fewer frequent words than this are not judged (ours): the mean cosine of a pair or three is
# noise (the 2 words of a 16-d test model measured 0.59; 5 words give 10 pairs), and no corpus
# worth pretraining on has so few.
MIN_WORDS_JUDGED = 5
# fastText's default epochs, for a corpus of this many tokens or more.
DEFAULT_EPOCHS = 5
# Smaller corpora get epochs for at least this many token passes: 5 epochs of a million tokens,
# fastText's default at the size its default suits. Measured on PTB (benchmarks/fasttext_epochs.py):
# vectors start random (cosine about 0), gather towards one direction, then spread again; 100k and
# 200k tokens are degenerate at 5 epochs and healthy at 20 (2M and 4M passes). No upper bound: a
# corpus of 359 tokens measured 0.63 at 100 epochs, 0.72 at 1,000 and 0.36 at 14,000 (20 s).
TOKEN_PASSES = 5_000_000


class DegenerateVectorsError(ConfigurationError):
    """fastText vectors nearly collinear: a biLM predicting their mean direction would look good."""


@dataclass(frozen=True)
class VectorHealth:
    """
    What `measure_vector_health` found.

    # Parameters

    path : `str`
        The `.bin` measured.
    words : `int`
        The frequent words measured (those with a vector that is not zero).
    mean_cosine : `float`
        Their mean pairwise cosine (pairs of distinct words).
    near_duplicate_fraction : `float`
        The fraction of them whose nearest other word is at cosine `NEAR_DUPLICATE_COSINE` or more.
    """

    path: str
    words: int
    mean_cosine: float
    near_duplicate_fraction: float

    @property
    def degenerate(self) -> bool:
        return self.words >= MIN_WORDS_JUDGED and (
            self.mean_cosine >= DEGENERATE_MEAN_COSINE or self.near_duplicate_fraction >= DEGENERATE_NEAR_DUPLICATES
        )

    def summary(self) -> str:
        return (
            f"mean pairwise cosine of the {self.words:,} most frequent words {self.mean_cosine:.3f}, "
            f"{self.near_duplicate_fraction:.1%} of them with a neighbour at cosine "
            f"{NEAR_DUPLICATE_COSINE} or more"
            + ("" if self.words >= MIN_WORDS_JUDGED else f" (too few words to judge: under {MIN_WORDS_JUDGED})")
        )


def frequent_word_matrix(vectors: FastTextVectors, count: int = FREQUENT_WORDS) -> np.ndarray:
    """
    `(n, dim)` float64: the unit vectors (as `get_word_vector`, n-grams included) of the first
    `count` dictionary words other than `</s>` whose vector is not zero.
    """
    words = [word for word in vectors.words[: count + 1] if word != vectors.eos_word][:count]
    ids = [vectors.subword_ids_tuple(word) for word in words]
    ids = [word_ids for word_ids in ids if word_ids]
    if not ids:
        return np.zeros((0, vectors.dim))
    # One read of all the rows, on the CPU whatever torch's default device (a model may be built
    # under `torch.device("meta")`); each word's vector is the mean of its rows, as `word_vector`.
    flat = [row for word_ids in ids for row in word_ids]
    rows = vectors.rows(flat, out=torch.empty(len(flat), vectors.dim, device="cpu")).numpy()
    starts = np.cumsum([0] + [len(word_ids) for word_ids in ids[:-1]])
    matrix = np.add.reduceat(rows.astype(np.float64), starts, axis=0)
    matrix /= np.array([len(word_ids) for word_ids in ids], dtype=np.float64)[:, None]
    norms = np.linalg.norm(matrix, axis=1)
    matrix = matrix[norms > 0] / norms[norms > 0, None]
    return matrix


def measure_vector_health(vectors: Union[FastTextVectors, str, Path], count: int = FREQUENT_WORDS) -> VectorHealth:
    """
    Measures the `count` most frequent words of a fastText model (a `.bin` path or one already
    open): their mean pairwise cosine, and how many have a near-duplicate nearest neighbour.
    About a second for 2,000 words.
    """
    if not isinstance(vectors, FastTextVectors):
        vectors = FastTextVectors.from_path(vectors)
    units = frequent_word_matrix(vectors, count)
    n = units.shape[0]
    if n < 2:
        return VectorHealth(str(vectors.path), n, 0.0, 0.0)
    total = units.sum(axis=0)
    # The sum over pairs i != j of u_i . u_j is |sum u|^2 minus the n diagonal ones.
    mean_cosine = (float(total @ total) - n) / (n * (n - 1))
    similarity = units @ units.T
    np.fill_diagonal(similarity, -np.inf)
    near = float((similarity.max(axis=1) >= NEAR_DUPLICATE_COSINE).mean())
    return VectorHealth(str(vectors.path), n, mean_cosine, near)


def epochs_for(tokens: int) -> int:
    """
    fastText epochs for a corpus of `tokens` tokens: `DEFAULT_EPOCHS` (fastText's) from a million
    tokens up, otherwise enough for `TOKEN_PASSES` token passes. Measured in
    `benchmarks/fasttext_epochs.py`.
    """
    if tokens <= 0:
        return DEFAULT_EPOCHS
    return max(DEFAULT_EPOCHS, -(-TOKEN_PASSES // tokens))


def count_tokens(corpus: Union[str, Path]) -> int:
    """The whitespace-separated tokens of a text file (read as bytes, in blocks of lines)."""
    tokens = 0
    with open(corpus, "rb") as handle:
        for line in handle:
            tokens += len(line.split())
    return tokens


def degenerate_vectors_error(health: VectorHealth, remedy: str) -> DegenerateVectorsError:
    return DegenerateVectorsError(
        f"fastText vectors {health.path} are degenerate: {health.summary()} (healthy vectors: "
        f"below {DEGENERATE_MEAN_COSINE}). A biLM would reach a low loss by predicting their mean "
        f"direction. {remedy}"
    )


_CHECKED: Dict[str, VectorHealth] = {}


def check_target_vectors(vectors: FastTextVectors) -> VectorHealth:
    """
    Measures the fastText vectors a biLM predicts, once per file and process (keyed by its
    fingerprint), logs the figures, and raises `DegenerateVectorsError` naming the file, the
    figures and the remedy if they are degenerate.
    """
    key = f"{vectors.path.absolute()}:{vectors.fingerprint}"
    health = _CHECKED.get(key)
    if health is None:
        health = _CHECKED[key] = measure_vector_health(vectors)
        logger.info("Target vectors %s: %s", vectors.path, health.summary())
    if health.degenerate:
        raise degenerate_vectors_error(
            health,
            "Train them again with more epochs on the same corpus (`allennlp elmoc-fasttext CORPUS "
            f"{vectors.path} --force` chooses enough from the corpus size; or `--epoch N`, "
            "docs/pretraining.md#fasttext-vectors-on-your-own-corpus).",
        )
    return health


class ConstantBaseline(Metric):
    """
    The cosine loss of the best constant prediction: `1 - |mean of the unit targets|`, the loss of
    a model that always predicts the targets' mean direction (the best constant `c` maximises
    `sum_i cos(c, t_i) = c . sum_i t_i/|t_i|`). Summed on the device, so adding targets never
    syncs; `get_metric` all-reduces the sums.
    """

    def __init__(self, dim: int) -> None:
        self._dim = dim
        self._sums: Optional[torch.Tensor] = None

    def __call__(self, targets: torch.Tensor) -> None:  # type: ignore[override]
        """`targets`: `(num_targets, dim)`; a zero vector counts as a target no direction fits."""
        with torch.no_grad():
            units = F.normalize(targets.detach().to(torch.float64), dim=-1, eps=1e-12)
            # The unit targets' sum, then their count, in one tensor (one all-reduce).
            sums = torch.cat([units.sum(0), units.new_full((1,), float(targets.size(0)))])
            self._sums = sums if self._sums is None else self._sums + sums

    def get_metric(self, reset: bool = False) -> float:
        sums = torch.zeros(self._dim + 1, dtype=torch.float64) if self._sums is None else self._sums
        if util.is_distributed():
            nccl = torch.distributed.get_backend() == "nccl"
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else "cpu"
            sums = sums.to(device, copy=True)  # all_reduce works in place: not on the running sums
            torch.distributed.all_reduce(sums)
        sums = sums.cpu()
        total, count = sums[:-1], float(sums[-1])
        if reset:
            self.reset()
        return 1.0 - float(total.norm()) / count if count > 0 else 0.0

    def reset(self) -> None:
        self._sums = None
