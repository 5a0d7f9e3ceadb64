"""
Synthetic inputs shared by the benchmarks and `scripts/soak_test.py`: a fastText `.bin` with
random vectors (the same format and reader as a trained one) and a Zipfian corpus in shards (the
One Billion Word layout). Importable from a script in this folder (`from synthetic_data import
...`); other scripts put this folder on `sys.path` first.
"""
from pathlib import Path
from typing import List, Tuple

import numpy as np


def random_fasttext(
    path: Path, num_words: int, bucket: int, dim: int, seed: int = 0, scale: float = 1.0, maxn: int = 6
) -> Path:
    """`</s>` and the words `w0` .. `w{num_words - 2}`, random vectors; kept if `path` exists."""
    from elmoc_allennlp.common.fasttext_vectors import write_fasttext_bin

    if path.exists():
        return path
    words = ["</s>"] + [f"w{index}" for index in range(num_words - 1)]
    matrix = np.random.default_rng(seed).standard_normal((num_words + bucket, dim), dtype=np.float32)
    return write_fasttext_bin(path, words, matrix * np.float32(scale), minn=3, maxn=maxn, bucket=bucket)


def zipf_corpus(
    directory: Path,
    sentences: int,
    shards: int,
    seed: int = 0,
    vocabulary_size: int = 5000,
    lengths: Tuple[int, int] = (5, 40),
) -> List[Path]:
    """`shards` files `news.en-XXXXX-of-YYYYY` of Zipfian sentences over `w0` ..; their paths."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    vocabulary = np.array([f"w{index}" for index in range(vocabulary_size)])
    ranks = np.arange(1, vocabulary_size + 1)
    probabilities = (1.0 / ranks) / (1.0 / ranks).sum()
    paths = []
    for shard in range(shards):
        sentence_lengths = rng.integers(lengths[0], lengths[1], size=sentences // shards)
        words = rng.choice(vocabulary_size, size=int(sentence_lengths.sum()), p=probabilities)
        ends = np.cumsum(sentence_lengths)
        lines = [" ".join(vocabulary[words[end - length : end]]) for end, length in zip(ends, sentence_lengths)]
        path = directory / f"news.en-{shard:05d}-of-{shards:05d}"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths
