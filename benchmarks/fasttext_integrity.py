#!/usr/bin/env python
"""
What the checks on untrusted fastText vectors cost, on a model the size of the published
`crawl-300d-2M-subword.bin` (2M words, 2M n-gram buckets, 300 dimensions, input and output
matrices: 7.2 GB).

    python -m benchmarks.fasttext_integrity [--words 2000000 --bucket 2000000 --dim 300]
                                            [--directory /tmp] [--keep]

Writes a synthetic `.bin` of that shape (random vectors, made-up words) and prints a table:

* opening it (`FastTextVectors`: parsing the dictionary);
* `fingerprint` (what archives record: size + BLAKE2b of the header, the dictionary and 64
  blocks of 64 KB spread over the matrices), with the file evicted from the page cache first
  (`posix_fadvise(DONTNEED)`: a cold read, as after a reboot) and again warm;
* the NaN/inf/magnitude check `rows()` runs on every batch, against the gather it follows;
* `check_unchanged` (one `stat`), which the token embedder runs before every lookup;
* for comparison, a full scan of the input matrix for NaN/inf (what checking at open would
  cost), cold.

The file is deleted afterwards unless `--keep`.
"""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.fasttext import vectors as ft

REPO_ROOT = Path(__file__).resolve().parents[1]

CHUNK_ROWS = 1 << 16


def write_synthetic(path: Path, words: int, bucket: int, dim: int) -> None:
    """A valid skipgram model of random vectors, streamed to disk (the matrices never in memory)."""
    rng = np.random.default_rng(0)

    def blocks():
        for start in range(0, words + bucket, CHUNK_ROWS):
            yield rng.standard_normal(
                (min(CHUNK_ROWS, words + bucket - start), dim), dtype=np.float32
            ) * 0.1

    write_fasttext_bin(
        path,
        [f"w{index:07d}" for index in range(words)],
        blocks(),
        minn=3,
        maxn=6,
        bucket=bucket,
        counts=range(words, 0, -1),
    )


def evict(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(descriptor)


def seconds(function, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        function()
    return (time.perf_counter() - start) / repeat


def per_call(function, budget: float = 0.5) -> float:
    function()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget:
        function()
        calls += 1
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--bucket", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--directory", default="/tmp")
    parser.add_argument("--keep", action="store_true")
    arguments = parser.parse_args()
    torch.set_num_threads(1)

    path = Path(arguments.directory) / "elmoc_integrity_benchmark.bin"
    started = time.perf_counter()
    if not path.exists():
        write_synthetic(path, arguments.words, arguments.bucket, arguments.dim)
    size = path.stat().st_size
    print(f"file: {path}, {size / 1e9:.2f} GB (written in {time.perf_counter() - started:.0f} s)")
    results = []
    try:
        evict(path)
        holder = {}
        results.append(
            (
                "open (parse header + dictionary), cold",
                seconds(lambda: holder.__setitem__("vectors", ft.FastTextVectors(path))),
            )
        )
        vectors = holder["vectors"]

        def fresh_fingerprint() -> str:
            vectors._fingerprint = None
            return vectors.fingerprint

        evict(path)
        results.append(("fingerprint, cold page cache", seconds(fresh_fingerprint)))
        results.append(("fingerprint, warm", seconds(fresh_fingerprint, repeat=5)))
        results.append(("check_unchanged (stat)", per_call(vectors.check_unchanged)))
        rng = np.random.default_rng(1)
        for count in (1_000, 5_000, 20_000):
            index = np.sort(rng.choice(vectors.num_rows, count, replace=False))
            out = torch.empty(count, vectors.dim)
            matrix = vectors._matrix_bytes.numpy()

            def gather() -> None:
                np.take(matrix, index, axis=0, out=out.numpy().view(np.uint8), mode="clip")

            vectors.rows(index, out=out)  # pages in
            results.append((f"gather {count:,} rows (warm)", per_call(gather)))
            results.append(
                (
                    "  + value check of those rows",
                    per_call(lambda: vectors._check_finite(out, index)),
                )
            )

        def full_scan() -> None:
            table = vectors._matrix_bytes
            for start in range(0, vectors.num_rows, CHUNK_ROWS):
                chunk = table[start : start + CHUNK_ROWS].clone().view(torch.float32)
                assert torch.isfinite(chunk).all()

        evict(path)
        results.append(("full NaN/inf scan of the input matrix, cold", seconds(full_scan)))
        print(f"fingerprint: {vectors.fingerprint}")
    finally:
        if not arguments.keep:
            path.unlink()

    print("\n| operation | time |\n|---|---|")
    for name, value in results:
        shown = f"{value * 1e3:,.1f} ms" if value >= 1e-3 else f"{value * 1e6:,.1f} us"
        print(f"| {name} | {shown} |")


if __name__ == "__main__":
    main()
