"""Degenerate fastText vectors are measured as such; the constant-prediction baseline is exact."""

import itertools

import numpy as np
import pytest

from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.fasttext.health import (
    DEGENERATE_MEAN_COSINE,
    MIN_WORDS_JUDGED,
    DegenerateVectorsError,
    check_target_vectors,
    count_tokens,
    epochs_for,
    measure_vector_health,
)

DIM, WORDS = 16, 40


def vectors_file(path, spread: float, seed: int = 0, maxn: int = 0):
    """`</s>` and WORDS words: a shared direction plus N(0, spread^2) noise (spread 0.05: degenerate)."""
    rng = np.random.default_rng(seed)
    words = ["</s>"] + [f"word{index}" for index in range(WORDS)]
    bucket = 10 if maxn else 0
    shared = rng.standard_normal(DIM)
    matrix = shared + spread * rng.standard_normal((len(words) + bucket, DIM))
    return write_fasttext_bin(
        path, words, matrix.astype(np.float32), minn=3, maxn=maxn, bucket=bucket
    )


def plain_mean_cosine(vectors: FastTextVectors, words) -> float:
    rows = [vectors.word_vector(word).astype(np.float64) for word in words]
    cosines = [
        a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in itertools.permutations(rows, 2)
    ]
    return float(np.mean(cosines))


@pytest.mark.parametrize("maxn", [0, 4])
def test_mean_cosine_is_the_mean_over_pairs_of_frequent_words(tmp_path, maxn):
    vectors = FastTextVectors(vectors_file(tmp_path / "v.bin", spread=1.0, maxn=maxn))
    health = measure_vector_health(vectors, count=10)
    # The first 10 dictionary words other than </s> (fastText sorts its dictionary by count).
    assert health.words == 10
    assert health.mean_cosine == pytest.approx(
        plain_mean_cosine(vectors, [f"word{index}" for index in range(10)]), abs=1e-6
    )


def test_vectors_near_one_direction_are_degenerate_and_random_ones_are_not(tmp_path):
    degenerate = measure_vector_health(vectors_file(tmp_path / "bad.bin", spread=0.05))
    assert degenerate.degenerate and degenerate.mean_cosine > 0.99
    assert degenerate.path == str(tmp_path / "bad.bin")
    healthy = measure_vector_health(vectors_file(tmp_path / "good.bin", spread=3.0))
    assert not healthy.degenerate
    assert healthy.mean_cosine < DEGENERATE_MEAN_COSINE and healthy.near_duplicate_fraction == 0.0


def test_near_duplicates_alone_make_vectors_degenerate(tmp_path):
    # Pairs of near-identical random vectors: mean cosine about 0, every word a near duplicate.
    rng = np.random.default_rng(1)
    base = rng.standard_normal((WORDS // 2, DIM))
    matrix = np.concatenate([rng.standard_normal((1, DIM)), base, base + 1e-4]).astype(np.float32)
    words = ["</s>"] + [f"word{index}" for index in range(WORDS)]
    health = measure_vector_health(
        write_fasttext_bin(tmp_path / "v.bin", words, matrix, minn=3, maxn=0, bucket=0)
    )
    assert abs(health.mean_cosine) < 0.2
    assert health.near_duplicate_fraction == 1.0 and health.degenerate


def test_check_target_vectors_names_the_file_the_figure_and_the_remedy(tmp_path):
    path = vectors_file(tmp_path / "bad.bin", spread=0.05)
    with pytest.raises(
        DegenerateVectorsError, match=r"bad\.bin are degenerate: mean pairwise cosine"
    ) as error:
        check_target_vectors(FastTextVectors(path))
    assert "--epoch N" in str(
        error.value
    ) and f"{measure_vector_health(path).mean_cosine:.3f}" in str(error.value)
    healthy = FastTextVectors(vectors_file(tmp_path / "good.bin", spread=3.0))
    assert check_target_vectors(healthy).words == WORDS


@pytest.mark.parametrize(
    "tokens, epochs",
    [
        (887_521, 6),
        (1_000_000, 5),
        (50_000_000, 5),
        (500_000, 10),
        (211_000, 24),
        (100_000, 50),
        (359, 13_928),
        (0, 5),
    ],
)
def test_epochs_grow_as_the_corpus_shrinks(tokens, epochs):
    assert epochs_for(tokens) == epochs


def test_count_tokens_counts_whitespace_separated_tokens(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"a b  c\n\n\td e\n\xff\xfe x\n")
    assert count_tokens(corpus) == 7


@pytest.mark.parametrize("words", [MIN_WORDS_JUDGED - 1, MIN_WORDS_JUDGED, MIN_WORDS_JUDGED + 1])
def test_vectors_of_fewer_words_than_can_be_judged_are_measured_but_not_refused(tmp_path, words):
    # The same nearly collinear vectors (spread 0.05) at the judged minimum's boundary.
    rng = np.random.default_rng(2)
    names = ["</s>"] + [f"word{index}" for index in range(words)]
    matrix = (rng.standard_normal(DIM) + 0.05 * rng.standard_normal((len(names), DIM))).astype(
        np.float32
    )
    path = write_fasttext_bin(tmp_path / "few.bin", names, matrix, minn=3, maxn=0, bucket=0)
    health = measure_vector_health(path)
    assert health.words == words and health.mean_cosine > 0.9
    assert health.degenerate == (words >= MIN_WORDS_JUDGED)
    if words < MIN_WORDS_JUDGED:
        assert check_target_vectors(FastTextVectors(path)).words == words
    else:
        with pytest.raises(DegenerateVectorsError):
            check_target_vectors(FastTextVectors(path))
