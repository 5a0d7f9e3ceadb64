"""
The pretraining data path against the model: how many bytes of a sharded corpus each
(rank, worker) reads, and how fast `MultiProcessDataLoader` delivers batches of the
`elmoc_lm_corpus` reader with the `elmoc_fasttext_subwords` indexer (the quickstart's reader and
indexer, window mode as in the paper's recipe), next to how fast the quickstart model
(`training_configs/pretrain/elmoc_small.jsonnet`: 2 layers of 512 cells -> 128, 100-d fastText)
trains on those batches on the same machine.

The corpus is synthetic: `--shards` files of Zipfian sentences over the words of a synthetic
fastText model (random vectors, same format and reader as a trained one), written to `--work-dir`.

(How the corpus is split between ranks, and what it costs: `benchmarks/ddp_data_balance.py`.)
* Loader: sentences/s and tokens/s of one pass over the corpus with 0 (in the main process), 1
  and 2 workers, with and without `gather_vectors` (fastText vectors looked up in the workers).
* Model: tokens/s of training steps (forward, backward, Adam) of the quickstart model on loader
  batches, in the main process.

    python -m benchmarks.loader_throughput                  # 20 shards x 400 sentences
    python -m benchmarks.loader_throughput --shards 20 --sentences-per-shard 2000 --steps 10
"""

import argparse
import os
import platform
import time
import warnings
from pathlib import Path
from typing import List, Tuple

import numpy as np
import torch


from allennlp.common import Params
from allennlp.data import Vocabulary
from allennlp.data.data_loaders import MultiProcessDataLoader
from allennlp.data.dataset_readers import DatasetReader
from allennlp.models import Model

import elmoc_allennlp  # noqa: F401
from benchmarks.common import random_fasttext

CONFIG = (
    Path(__file__).resolve().parents[1] / "training_configs" / "pretrain" / "elmoc_small.jsonnet"
)


def make_corpus(directory: Path, shards: int, sentences: int, num_words: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(1)
    for shard in range(shards):
        path = directory / f"news.en-{shard:05d}-of-{shards:05d}"
        if path.exists():
            continue
        lines = []
        for _ in range(sentences):
            length = int(rng.randint(5, 45))  # 1B Word sentences average ~27 tokens
            ids = np.minimum(rng.zipf(1.2, size=length), num_words - 1)
            # Some words outside the fastText dictionary, embedded from n-grams only.
            lines.append(" ".join(f"w{i}" if i % 7 else f"oov{i}x" for i in ids))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def config_params(fasttext: Path) -> Params:
    """The quickstart config with `fasttext` as its vectors (the data paths are not read)."""
    return Params.from_file(
        str(CONFIG),
        ext_vars={
            "ELMOC_FASTTEXT": str(fasttext),
            "ELMOC_TRAIN_DATA": "unused",
            "ELMOC_VALIDATION_DATA": "unused",
        },
    )


def reader_params(fasttext: Path, gather: bool) -> Params:
    reader = config_params(fasttext)["dataset_reader"].as_dict()
    reader.pop("max_sequence_length", None)
    reader.update({"mode": "window", "window_length": 20})
    reader["token_indexers"]["fasttext"]["gather_vectors"] = gather
    return Params(reader)


def loader_pass(corpus: Path, fasttext: Path, workers: int, gather: bool, batch_size: int):
    reader = DatasetReader.from_params(reader_params(fasttext, gather))
    loader = MultiProcessDataLoader(
        reader,
        str(corpus),
        batch_size=batch_size,
        num_workers=workers,
        max_instances_in_memory=batch_size * 8 if workers else None,
    )
    loader.index_with(Vocabulary())
    started = time.perf_counter()
    windows = tokens = 0
    for batch in loader:
        mask = batch["tokens"]["fasttext"]["mask"]
        windows += mask.size(0)
        tokens += int(mask.sum()) - mask.size(0)  # each LM predicts all but one token per window
    return time.perf_counter() - started, windows, tokens


def model_tokens_per_second(
    corpus: Path, fasttext: Path, steps: int, batch_size: int, gather: bool
):
    params = config_params(fasttext)
    reader = DatasetReader.from_params(reader_params(fasttext, gather))
    loader = MultiProcessDataLoader(reader, str(corpus), batch_size=batch_size)
    vocab = Vocabulary()
    loader.index_with(vocab)
    torch.manual_seed(0)
    model = Model.from_params(vocab=vocab, params=params.pop("model"))
    model.train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == steps + 1:
            break
    times, tokens = [], []
    for index, batch in enumerate(batches):
        started = time.perf_counter()
        optimizer.zero_grad()
        model(**batch)["loss"].backward()
        optimizer.step()
        if index:  # the first step warms up
            times.append(time.perf_counter() - started)
            mask = batch["tokens"]["fasttext"]["mask"]
            tokens.append(int(mask.sum()) - mask.size(0))
    return sum(tokens) / sum(times), sum(times) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default="/tmp/elmoc_loader_benchmark")
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--sentences-per-shard", type=int, default=400)
    parser.add_argument("--words", type=int, default=20_000)
    parser.add_argument("--bucket", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6, help="model steps timed")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    work = Path(args.work_dir)
    fasttext = random_fasttext(
        work / f"synthetic_{args.words}_{args.bucket}.bin", args.words, args.bucket, 100, scale=0.1
    )
    corpus = make_corpus(
        work / f"corpus_{args.shards}x{args.sentences_per_shard}",
        args.shards,
        args.sentences_per_shard,
        args.words,
    )
    total_bytes = sum(path.stat().st_size for path in corpus.iterdir())
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; corpus {args.shards} shards x {args.sentences_per_shard} "
        f"sentences, {total_bytes / 1e6:.2f} MB; window mode, 20 tokens; batch {args.batch_size}"
    )

    print("\n**Loader, one pass over the corpus (single process, rank 0 of 1)**\n")
    print("| workers | gather_vectors | s | windows/s | sentences/s | predicted tokens/s |")
    print("|---:|---|---:|---:|---:|---:|")
    sentences = args.shards * args.sentences_per_shard
    rows: List[Tuple[int, bool, float]] = []
    for gather in (False, True):
        for num_workers in (0, 1, 2):
            seconds, windows, tokens = loader_pass(
                corpus, fasttext, num_workers, gather, args.batch_size
            )
            rows.append((num_workers, gather, tokens / seconds))
            print(
                f"| {num_workers} | {gather} | {seconds:.2f} | {windows / seconds:,.0f} | "
                f"{sentences / seconds:,.0f} | {tokens / seconds:,.0f} |"
            )
    print("\n**Model (elmoc_small), training steps in the main process**\n")
    print("| gather_vectors | ms / step | predicted tokens/s |")
    print("|---|---:|---:|")
    for gather in (False, True):
        rate, step = model_tokens_per_second(corpus, fasttext, args.steps, args.batch_size, gather)
        print(f"| {gather} | {step * 1e3:.0f} | {rate:,.0f} |")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
