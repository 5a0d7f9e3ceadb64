#!/usr/bin/env python
"""
Memory and time of the biLM's `retrieval_accuracy` in evaluation, where every prediction of a
batch is scored (`allennlp evaluate`, validation, predict): the full `N x N` score matrix it
first computed ("full") against the library's `retrieval_accuracy` ("chunked": rows in chunks of
`RETRIEVAL_SCORE_BUDGET` scores, against the batch's distinct target vectors), on the same data.

    python -m benchmarks.retrieval_scoring                       # N = 2,048 .. 300,000, dim 300
    python -m benchmarks.retrieval_scoring --sizes 15360 --dim 300 --words 10000

N is the number of predicting positions in one batch and direction: 15,360 is the paper config's
evaluation batch (768 windows of 20 tokens), 300,000 one over-long line. Targets are the vectors
of Zipfian word ids over `--words` random words (the distinct count is printed); predictions are
the targets plus noise. Each (N, method) runs in its own process: peak memory is the growth of
its resident set during the first call (Linux `VmHWM`, `benchmarks.common.MemoryMeter`), time the
least CPU time (all threads: steadier than the wall clock on a shared machine) of up to 5 calls
(repeated while they total under 3 s). The full matrix is skipped where its scores alone exceed `--full-max-gb`.
Both methods' accuracies are printed: they must agree.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def full_matrix_accuracy(predictions, gold, targets):
    """The metric as first written: every prediction scored against every target at once."""
    import torch.nn.functional as F

    scores = F.normalize(predictions, dim=-1) @ F.normalize(targets, dim=-1).t()
    nearest = targets[scores.argmax(dim=-1)]
    return (nearest == gold).all(dim=-1).float().mean()


def _batch(num_positions: int, dim: int, num_words: int, seed: int = 0):
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    ranks = np.arange(1, num_words + 1)
    ids = rng.choice(num_words, size=num_positions, p=(1.0 / ranks) / (1.0 / ranks).sum())
    generator = torch.Generator().manual_seed(seed)
    words = torch.randn(num_words, dim, generator=generator)
    targets = words[torch.from_numpy(ids)]
    predictions = targets + 5.0 * torch.randn(num_positions, dim, generator=generator)
    return predictions, targets, len(np.unique(ids))


def _cell(method: str, num_positions: int, dim: int, num_words: int) -> dict:
    """One measurement, in this process."""
    import torch

    from benchmarks.common import MemoryMeter, Timer, fastest
    from elmoc_allennlp.models.bilm_metrics import retrieval_accuracy

    def score(predictions, targets):
        if method == "full":
            return full_matrix_accuracy(predictions, targets, targets)
        return retrieval_accuracy(predictions, targets, targets, deduplicate=True)

    predictions, targets, distinct = _batch(num_positions, dim, num_words)
    with torch.no_grad():
        score(predictions[:64], targets[:64])  # first-call allocations (BLAS buffers)
        meter = MemoryMeter("cpu")
        meter.reset()
        result = {}
        timings = [
            Timer("cpu").time(lambda: result.update(accuracy=score(predictions, targets).item()))
        ]
        peak = meter.peak()
        while len(timings) < 5 and sum(timing["wall"] for timing in timings) < 3.0:
            timings.append(Timer("cpu").time(lambda: score(predictions, targets).item()))
    seconds = fastest(timings)["cpu"]
    return {"distinct": distinct, "peak_mb": peak / 2**20, "seconds": seconds, **result}


def _measure(method: str, num_positions: int, args) -> dict:
    command = [
        sys.executable,
        "-m",
        "benchmarks.retrieval_scoring",
        "--cell",
        method,
        "--sizes",
        str(num_positions),
        "--dim",
        str(args.dim),
        "--words",
        str(args.words),
    ]
    environment = dict(os.environ, MALLOC_ARENA_MAX="2")
    completed = subprocess.run(
        command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True
    )
    if completed.returncode != 0:
        return {
            "error": (
                completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else "failed"
            )
        }
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2048,15360,30000,300000", help="comma-separated N")
    parser.add_argument("--dim", type=int, default=300, help="vector size (ELMo-C: fastText's 300)")
    parser.add_argument(
        "--words", type=int, default=10000, help="distinct words drawn from (PTB: 10,000)"
    )
    parser.add_argument(
        "--full-max-gb", type=float, default=4.0, help="largest full score matrix run"
    )
    parser.add_argument("--cell", choices=["full", "chunked"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.cell:
        print(json.dumps(_cell(args.cell, sizes[0], args.dim, args.words)))
        return

    from benchmarks.common import machine_description
    from elmoc_allennlp.models.bilm_metrics import RETRIEVAL_SCORE_BUDGET

    print(machine_description())
    print(
        f"dim {args.dim}, Zipfian ids over {args.words:,} words, budget {RETRIEVAL_SCORE_BUDGET:,} scores"
    )
    header = (
        f"{'N':>9} {'distinct':>8} {'full matrix':>11} | {'full peak':>10} {'full cpu s':>10} {'acc':>7} | "
        f"{'chunked peak':>12} {'chunked cpu s':>13} {'acc':>7} | {'memory':>7} {'time':>6}"
    )
    print(header)
    print("-" * len(header))
    for num_positions in sizes:
        matrix_gb = num_positions**2 * 4 / 1e9
        chunked = _measure("chunked", num_positions, args)
        if matrix_gb <= args.full_max_gb:
            full = _measure("full", num_positions, args)
        else:
            full = {"error": "skipped"}
        if "error" in chunked:
            print(f"{num_positions:>9,} chunked failed: {chunked['error']}")
            continue
        if "error" in full:
            full_text = f"{full['error']:>10} {'':>10} {'':>7}"
            ratios = f"{'':>7} {'':>6}"
        else:
            full_text = (
                f"{full['peak_mb']:>7,.0f} MB {full['seconds']:>10.2f} {full['accuracy']:>7.4f}"
            )
            ratios = (
                f"{full['peak_mb'] / max(chunked['peak_mb'], 1):>6.0f}x "
                f"{full['seconds'] / chunked['seconds']:>5.1f}x"
            )
        print(
            f"{num_positions:>9,} {chunked['distinct']:>8,} {matrix_gb:>8.2f} GB | {full_text} | "
            f"{chunked['peak_mb']:>9,.0f} MB {chunked['seconds']:>13.2f} {chunked['accuracy']:>7.4f} | {ratios}"
        )
    print("memory, time: full / chunked (peak resident-set growth during the call; CPU time)")


if __name__ == "__main__":
    main()
