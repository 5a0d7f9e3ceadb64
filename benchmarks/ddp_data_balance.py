"""
How much of the corpus a distributed epoch trains on, computed with the project's reader
(`elmoc_lm_corpus`): for `R` ranks, each rank's share is read in this process with the rank set
as allennlp sets it (`_set_distributed_info`); allennlp's trainer ends an epoch when the first
rank runs out of batches, so each rank trains `min_r ceil(n_r / B)` batches and the fraction of
the corpus trained is `sum_r min(n_r, that x B) / N`.

The corpus mirrors the One Billion Word training set that the paper's glob reads: 99 shards
(`news.en-00001..99-of-00100`) of equal numbers of sentences with random lengths (mean ~27
tokens), in window mode (20-token windows). `--batch` is scaled so that a shard holds about as
many batches as a real shard holds of the paper's 768-window batches (~530). Run it against
another checkout's reader with `PYTHONPATH=/path/to/checkout`.

    python -m benchmarks.ddp_data_balance
"""

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path


from allennlp.data.dataset_readers.dataset_reader import DistributedInfo

from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import LanguageModelCorpusReader


def make_corpus(directory: Path, shards: int, sentences: int) -> Path:
    generator = random.Random(0)
    directory.mkdir(parents=True, exist_ok=True)
    for shard in range(1, shards + 1):
        lines = (
            " ".join(f"w{generator.randrange(5000)}" for _ in range(generator.randint(5, 49)))
            for _ in range(sentences)
        )
        (directory / f"news.en-{shard:05d}-of-00100").write_text("\n".join(lines) + "\n")
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=99)
    parser.add_argument("--sentences-per-shard", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1, help="windows per batch and rank")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        corpus = make_corpus(Path(work), args.shards, args.sentences_per_shard)
        reader = LanguageModelCorpusReader(mode="window", window_length=20)
        total = sum(1 for _ in reader.read(str(corpus / "news.en-*")))
        print(
            f"{args.shards} shards, {total} windows, batch {args.batch}; reader from "
            f"{sys.modules[LanguageModelCorpusReader.__module__].__file__}\n"
        )
        print(
            "| ranks | windows per rank (min / max) | batches per rank (min / max) | "
            "fraction of the corpus trained | read s per rank (max) |"
        )
        print("|---:|---|---|---:|---:|")
        for ranks in args.ranks:
            counts, seconds = [], []
            for rank in range(ranks):
                reader._set_distributed_info(DistributedInfo(ranks, rank) if ranks > 1 else None)
                started = time.perf_counter()
                counts.append(sum(1 for _ in reader.read(str(corpus / "news.en-*"))))
                seconds.append(time.perf_counter() - started)
            batches = [-(-count // args.batch) for count in counts]
            trained = sum(min(count, min(batches) * args.batch) for count in counts)
            print(
                f"| {ranks} | {min(counts)} / {max(counts)} | {min(batches)} / {max(batches)} | "
                f"{trained / total:.4f} | {max(seconds):.2f} |"
            )


if __name__ == "__main__":
    main()
