"""
What the corpus index (`elmoc_allennlp/data/dataset_readers/corpus_index.py`) saves each reader,
and what it costs to build.

1. Per reader and epoch: the bytes read and the wall time to the first batch, for 1, 2, 4 and 8
   readers (ranks x loader workers: each simulated here as rank `r` of `R`, one after the
   other, each as a fresh process would start: no index or plan in memory), on a 99-shard
   synthetic corpus (`ddp_data_balance.make_corpus`: One Billion Word-like shards), window mode
   (20-token windows), shuffled epoch 0 as in `elmoc.libsonnet`; the first batch is 768 windows
   (the paper's batch). "corpus bytes" is the reader's own count of the corpus bytes it read;
   "all bytes" is what the process read from files during the read (`/proc/self/io` `rchar`:
   the corpus, the index files and the index's content samples), Linux only.
2. Index build time on a ~100 MB corpus (1 process and all CPUs), per GB, and the time to load
   the cached indexes.

    python -m benchmarks.corpus_index
    # against the reader before the index (commit 8d74d5e), side by side:
    mkdir -p /tmp/before && git archive 8d74d5e elmoc_allennlp | tar -x -C /tmp/before
    python -m benchmarks.corpus_index --before /tmp/before
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _rchar() -> int:
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))
    except (OSError, StopIteration):
        return -1


def measure_readers(corpus: str, readers_list, batch: int) -> dict:
    """Runs in a process whose `PYTHONPATH` picks the reader to measure."""
    from allennlp.data.dataset_readers.dataset_reader import DistributedInfo
    from elmoc_allennlp.data.dataset_readers import lm_corpus_reader
    from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import LanguageModelCorpusReader

    index_module = sys.modules.get("elmoc_allennlp.data.dataset_readers.corpus_index")
    pattern = os.path.join(corpus, "news.en-*")
    if index_module is not None:  # build the indexes first (section 2 times that)
        LanguageModelCorpusReader(mode="window").num_instances(pattern)
    results = {"reader": lm_corpus_reader.__file__}
    for num_readers in readers_list:
        rows = []
        for rank in range(num_readers):
            if index_module is not None:
                index_module._LOADED.clear()  # as a new process
            reader = LanguageModelCorpusReader(mode="window", window_length=20, shuffle=True)
            reader.set_epoch(0)
            reader._set_distributed_info(
                DistributedInfo(num_readers, rank) if num_readers > 1 else None
            )
            rchar, started = _rchar(), time.perf_counter()
            first_batch, count = None, 0
            for _ in reader.read(pattern):
                count += 1
                if count == batch:
                    first_batch = time.perf_counter() - started
            epoch = time.perf_counter() - started
            statistics = reader.last_read_statistics
            rows.append(
                {
                    "instances": count,
                    "first_batch_s": first_batch if first_batch is not None else epoch,
                    "epoch_s": epoch,
                    "corpus_bytes": statistics["bytes"],
                    "files": statistics["files"],
                    "all_bytes": _rchar() - rchar if rchar >= 0 else -1,
                }
            )
        results[str(num_readers)] = rows
    return results


def _run_measure(pythonpath: str, corpus: str, readers_list, batch: int) -> dict:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--measure",
        corpus,
        "--batch",
        str(batch),
        "--readers",
        *map(str, readers_list),
    ]
    environment = dict(os.environ, PYTHONPATH=pythonpath)
    output = subprocess.run(
        command, env=environment, check=True, capture_output=True, text=True, cwd=pythonpath
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def _megabytes(value: float) -> str:
    return f"{value / 1e6:,.2f}"


def _table(name: str, results: dict, readers_list, corpus_bytes: int) -> None:
    print(f"\n{name} (reader: {results['reader']})\n")
    print(
        "| readers | corpus MB read per reader (mean / max) | of the corpus (max) | all MB read per reader (max) "
        "| files opened (max) | first batch s (max) | epoch read s (max) | windows per reader (min / max) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for num_readers in readers_list:
        rows = results[str(num_readers)]
        corpus_read = [row["corpus_bytes"] for row in rows]
        counts = [row["instances"] for row in rows]
        print(
            f"| {num_readers} | {_megabytes(sum(corpus_read) / len(rows))} / {_megabytes(max(corpus_read))} "
            f"| {max(corpus_read) / corpus_bytes:.3f} | {_megabytes(max(row['all_bytes'] for row in rows))} "
            f"| {max(row['files'] for row in rows)} | {max(row['first_batch_s'] for row in rows):.2f} "
            f"| {max(row['epoch_s'] for row in rows):.2f} | {min(counts):,} / {max(counts):,} |"
        )


def _index_build(work: Path, megabytes: int) -> None:
    from elmoc_allennlp.data.dataset_readers import corpus_index

    directory = work / "big"
    directory.mkdir()
    generator = random.Random(1)
    words = [f"w{i}" for i in range(50_000)]
    shard_bytes = megabytes * 1_000_000 // 10
    for shard in range(10):
        with open(directory / f"news.en-{shard:05d}-of-00010", "w") as shard_file:
            written = 0
            while written < shard_bytes:
                line = " ".join(generator.choices(words, k=generator.randint(5, 49))) + "\n"
                written += shard_file.write(line)
    paths = sorted(str(path) for path in directory.iterdir())
    size = sum(os.path.getsize(path) for path in paths)
    lines = None
    print(f"\nIndex build: {len(paths)} shards, {size / 1e6:.1f} MB, {os.cpu_count()} CPUs\n")
    print(
        "| processes | build s | s per GB | cached load s (fresh process) | index size / corpus size |"
    )
    print("|---:|---:|---:|---:|---:|")
    for processes in (1, os.cpu_count() or 1):
        corpus_index._LOADED.clear()
        for path in paths:
            for index_path in (corpus_index.index_path_beside(path),):
                if os.path.exists(index_path):
                    os.remove(index_path)
        started = time.perf_counter()
        indexes = corpus_index.load_indexes(paths, processes=processes)
        build = time.perf_counter() - started
        lines = sum(index.num_lines for index in indexes)
        corpus_index._LOADED.clear()
        started = time.perf_counter()
        corpus_index.load_indexes(paths)
        load = time.perf_counter() - started
        index_size = sum(os.path.getsize(corpus_index.index_path_beside(path)) for path in paths)
        print(
            f"| {processes} | {build:.2f} | {build / (size / 1e9):.1f} | {load:.3f} | {index_size / size:.3f} |"
        )
    print(f"\n({lines:,} lines)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=99)
    parser.add_argument("--sentences-per-shard", type=int, default=1000)
    parser.add_argument("--readers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--batch", type=int, default=768, help="windows in the first batch")
    parser.add_argument("--before", help="a checkout (its root) of the reader to compare with")
    parser.add_argument("--build-megabytes", type=int, default=100)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure_readers(args.measure, args.readers, args.batch)))
        return
    from benchmarks.ddp_data_balance import make_corpus

    work = Path(tempfile.mkdtemp(prefix="elmoc-corpus-index-"))
    try:
        corpus = make_corpus(work / "corpus", args.shards, args.sentences_per_shard)
        corpus_bytes = sum(path.stat().st_size for path in corpus.iterdir())
        print(
            f"{args.shards} shards x {args.sentences_per_shard} sentences, {corpus_bytes / 1e6:.1f} MB; "
            f"window mode, shuffled epoch; first batch = {args.batch} windows"
        )
        runs = []
        if args.before:
            runs.append(("Before (every reader scans every file)", args.before))
        runs.append(("After (each reader reads its share, by the index)", REPO))
        for name, pythonpath in runs:
            copy = work / f"corpus-{len(name)}"
            shutil.copytree(corpus, copy)  # no index from another run
            _table(
                name,
                _run_measure(pythonpath, str(copy), args.readers, args.batch),
                args.readers,
                corpus_bytes,
            )
        _index_build(work, args.build_megabytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
