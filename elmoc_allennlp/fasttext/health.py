"""Whether fastText vectors can serve as biLM targets (nearly collinear ones cannot: docs/pretraining.md)."""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Union

import numpy as np
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.fasttext.vectors import FastTextVectors

logger = logging.getLogger(__name__)

# fastText's dictionary is sorted by count: its first words are the most frequent.
FREQUENT_WORDS = 2000
# Thresholds and the epochs rule: measured in docs/pretraining.md#fasttext-vectors-on-your-own-corpus.
DEGENERATE_MEAN_COSINE = 0.5
NEAR_DUPLICATE_COSINE = 0.999
DEGENERATE_NEAR_DUPLICATES = 0.5
# Fewer words are not judged (ours: the mean cosine of a few pairs is noise).
MIN_WORDS_JUDGED = 5
DEFAULT_EPOCHS = 5
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
            self.mean_cosine >= DEGENERATE_MEAN_COSINE
            or self.near_duplicate_fraction >= DEGENERATE_NEAR_DUPLICATES
        )

    def summary(self) -> str:
        return (
            f"mean pairwise cosine of the {self.words:,} most frequent words {self.mean_cosine:.3f}, "
            f"{self.near_duplicate_fraction:.1%} of them with a neighbour at cosine "
            f"{NEAR_DUPLICATE_COSINE} or more"
            + (
                ""
                if self.words >= MIN_WORDS_JUDGED
                else f" (too few words to judge: under {MIN_WORDS_JUDGED})"
            )
        )

    def verdict(self) -> str:
        """`healthy`, `degenerate` or `not judged`, with the thresholds."""
        thresholds = (
            f"degenerate from a mean cosine of {DEGENERATE_MEAN_COSINE} or "
            f"{DEGENERATE_NEAR_DUPLICATES:.0%} near duplicates"
        )
        if self.words < MIN_WORDS_JUDGED:
            return f"not judged (under {MIN_WORDS_JUDGED} words)"
        if self.degenerate:
            return f"degenerate, useless as biLM targets ({thresholds})"
        return f"healthy ({thresholds})"


def frequent_word_matrix(vectors: FastTextVectors, count: int = FREQUENT_WORDS) -> np.ndarray:
    """`(n, dim)` float64 unit vectors (as `get_word_vector`) of the first `count` words but `</s>`, not zero."""
    words = [word for word in vectors.words[: count + 1] if word != vectors.eos_word][:count]
    ids = [word_ids for word_ids in map(vectors.subword_ids_tuple, words) if word_ids]
    if not ids:
        return np.zeros((0, vectors.dim))
    # One read of all the rows, on the CPU even under `torch.device("meta")`; each word's mean, as `word_vector`.
    flat = [row for word_ids in ids for row in word_ids]
    rows = vectors.rows(flat, out=torch.empty(len(flat), vectors.dim, device="cpu")).numpy()
    starts = np.cumsum([0] + [len(word_ids) for word_ids in ids[:-1]])
    matrix = np.add.reduceat(rows.astype(np.float64), starts, axis=0)
    matrix /= np.array([len(word_ids) for word_ids in ids], dtype=np.float64)[:, None]
    norms = np.linalg.norm(matrix, axis=1)
    return matrix[norms > 0] / norms[norms > 0, None]


def measure_vector_health(
    vectors: Union[FastTextVectors, str, Path], count: int = FREQUENT_WORDS
) -> VectorHealth:
    """The mean pairwise cosine of a model's `count` most frequent words, and their near duplicates."""
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
    """fastText epochs for a corpus of `tokens` tokens: `DEFAULT_EPOCHS`, or enough for `TOKEN_PASSES` passes."""
    if tokens <= 0:
        return DEFAULT_EPOCHS
    return max(DEFAULT_EPOCHS, -(-TOKEN_PASSES // tokens))


def count_tokens(corpus: Union[str, Path]) -> int:
    """The whitespace-separated tokens of a text file (read as bytes)."""
    with open(corpus, "rb") as handle:
        return sum(len(line.split()) for line in handle)


def more_epochs_remedy(epoch: int, tokens: int) -> str:
    """What to train after `epoch` epochs on `tokens` tokens gave degenerate vectors: the rule's
    epochs, or more."""
    rule = epochs_for(tokens)
    if epoch < rule:
        return (
            f"Train the {rule} epochs the rule picks for {tokens:,} tokens (this run: {epoch}): leave "
            f"--epoch out, or --epoch {rule}."
        )
    return (
        f"Train more epochs than this run's {epoch} (the rule picks {rule} for {tokens:,} tokens): "
        f"--epoch {2 * epoch}, or give a larger corpus."
    )


def degenerate_vectors_error(health: VectorHealth, remedy: str) -> DegenerateVectorsError:
    return DegenerateVectorsError(
        f"fastText vectors {health.path} are degenerate: {health.summary()} (healthy vectors: "
        f"below {DEGENERATE_MEAN_COSINE}). A biLM would reach a low loss by predicting their mean "
        f"direction. {remedy}"
    )


_CHECKED: Dict[str, VectorHealth] = {}


def check_target_vectors(vectors: FastTextVectors) -> VectorHealth:
    """Measures a biLM's target vectors once per file and process; a `DegenerateVectorsError` if degenerate."""
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
