#!/usr/bin/env python
"""
Memory of ELMo-C pretraining at scale, measured on real `allennlp train` runs (the process tree is
sampled from /proc every 0.2 s: RSS, PSS and private memory of every process).

    python -m benchmarks.scale_memory corpus [--sentences 20000] [--scales 1 10]
        Peak memory while training one epoch on a synthetic sharded corpus of 1x and 10x the
        size (lazy reader, 2 data-loader workers, max_instances_in_memory). It must not grow
        with the corpus.

    python -m benchmarks.scale_memory fasttext [--words 2000000 --bucket 2000000 --dim 100]
        Memory per worker of a 2-worker distributed run (gloo, CPU) whose frozen input/output
        vectors are a large fastText model: how much of the memory-mapped table each worker holds
        privately (none: its pages are shared through the page cache) and what the per-process
        dictionary costs.

Results are printed as JSON and written to OUTPUT_DIR/memory_<mode>.json.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

from benchmarks.common import random_fasttext, zipf_corpus

REPO_ROOT = Path(__file__).resolve().parents[1]

PAGE_KB = 1  # smaps figures are in kB


def _children(pid: int) -> List[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _tree(pid: int) -> List[int]:
    pids, frontier = [pid], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in _children(parent)]
        pids.extend(frontier)
    return pids


def _memory(pid: int) -> Dict[str, int]:
    """
    kB: rss, pss, private (clean + dirty pages mapped by this process only, including file pages
    such as a memory-mapped fastText table that no other process maps), shared, and anonymous
    (heap and other memory that is not backed by a file: what the process really costs).
    """
    values: Dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    values[parts[0][:-1]] = int(parts[1])
    except OSError:
        return {}
    return {
        "rss": values.get("Rss", 0),
        "pss": values.get("Pss", 0),
        "private": values.get("Private_Clean", 0) + values.get("Private_Dirty", 0),
        "shared": values.get("Shared_Clean", 0) + values.get("Shared_Dirty", 0),
        "anonymous": values.get("Anonymous", 0),
    }


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    if "spawn_main" in command:
        return "distributed worker (spawned)"
    return "data-loader worker (forked)"


class TreeSampler(threading.Thread):
    """Samples the memory of a process tree until stopped; keeps per-process and total peaks."""

    def __init__(self, root_pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.interval = interval
        self.stop_event = threading.Event()
        self.peak_total = {"rss": 0, "pss": 0, "private": 0, "anonymous": 0}
        self.peak_by_pid: Dict[int, Dict[str, int]] = {}
        self.roles: Dict[int, str] = {}
        self.samples = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            total = {"rss": 0, "pss": 0, "private": 0, "anonymous": 0}
            for pid in _tree(self.root_pid):
                memory = _memory(pid)
                if not memory:
                    continue
                self.roles.setdefault(pid, "main" if pid == self.root_pid else _role(pid))
                peak = self.peak_by_pid.setdefault(pid, dict.fromkeys(memory, 0))
                for key, value in memory.items():
                    peak[key] = max(peak[key], value)
                for key in total:
                    total[key] += memory[key]
            for key in total:
                self.peak_total[key] = max(self.peak_total[key], total[key])
            self.samples += 1
            self.stop_event.wait(self.interval)


def _train(config: Path, run: Path) -> Dict:
    if run.exists():
        shutil.rmtree(run)
    command = [sys.executable, "-m", "allennlp", "train", str(config), "-s", str(run)]
    command += ["--include-package", "elmoc_allennlp", "--file-friendly-logging"]
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    started = time.time()
    with open(str(run) + ".log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
        sampler = TreeSampler(process.pid)
        sampler.start()
        return_code = process.wait()
        sampler.stop_event.set()
        sampler.join()
    if return_code != 0:
        raise RuntimeError(f"training failed, see {run}.log")
    metrics = json.loads((run / "metrics.json").read_text())
    mb = lambda kb: round(kb / 1024, 1)  # noqa: E731
    processes = [
        {"role": sampler.roles.get(pid, "?"), **{f"peak_{k}_mb": mb(v) for k, v in peak.items()}}
        for pid, peak in sorted(sampler.peak_by_pid.items())
        if peak["rss"] > 20 * 1024  # skip shells and tiny helpers
    ]
    return {
        "seconds": round(time.time() - started, 1),
        "peak_total_rss_mb": mb(sampler.peak_total["rss"]),
        "peak_total_pss_mb": mb(sampler.peak_total["pss"]),
        "peak_total_private_mb": mb(sampler.peak_total["private"]),
        "peak_total_anonymous_mb": mb(sampler.peak_total["anonymous"]),
        "processes": processes,
        "training_loss": metrics.get("training_loss"),
        "samples": sampler.samples,
    }


def _write_config(path: Path, settings: Dict, data_loader: Dict = None) -> None:
    libsonnet = REPO_ROOT / "training_configs" / "pretrain" / "elmoc.libsonnet"
    text = f"(import {json.dumps(str(libsonnet))}).config({json.dumps(settings, indent=2)})"
    if data_loader is not None:
        text += f" + {{ data_loader+: {json.dumps(data_loader)} }}"
    path.write_text(text + "\n")


def corpus_mode(args: argparse.Namespace, output: Path) -> Dict:
    fasttext = random_fasttext(output / "vectors.bin", 5001, 20000, 16, args.seed)
    results = {}
    for scale in args.scales:
        corpus = output / f"corpus_x{scale}"
        if corpus.exists():
            shutil.rmtree(corpus)
        size = sum(
            path.stat().st_size
            for path in zipf_corpus(corpus, args.sentences * scale, 10 * scale, args.seed)
        )
        config = output / f"corpus_x{scale}.jsonnet"
        _write_config(
            config,
            {
                "fasttext_path": str(fasttext),
                "embedding_dim": 16,
                "train_data_path": str(corpus / "news.en-*"),
                "projection_dim": 16,
                "cell_dim": 64,
                "batch_size": 64,
                "num_epochs": 1,
                "max_sequence_length": 50,
                "num_workers": 2,
                "max_instances_in_memory": 64 * 20,
                "learning_rate": 0.003,
                "warmup_steps": 10,
                "decay_start": 100,
                "decay_end": 1000,
                "num_replicas": 1,
            },
        )
        result = _train(config, output / f"run_x{scale}")
        result["corpus_bytes"] = size
        result["sentences"] = args.sentences * scale
        results[f"x{scale}"] = result
        shutil.rmtree(corpus)
        print(json.dumps({f"x{scale}": result}), flush=True)
    return results


_PROBE = """
import sys, time
from elmoc_allennlp.fasttext.vectors import FastTextVectors

def memory():
    values = {}
    for line in open("/proc/self/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            values[parts[0].rstrip(":")] = int(parts[1])
    return values

before = memory()
started = time.time()
vectors = FastTextVectors(%r)
after = memory()
file_pages = (after["Rss"] - after["Anonymous"]) - (before["Rss"] - before["Anonymous"])
print(after["Anonymous"] - before["Anonymous"], file_pages, time.time() - started)
"""


def fasttext_mode(args: argparse.Namespace, output: Path) -> Dict:
    started = time.time()
    fasttext = random_fasttext(
        output / f"big_{args.words}_{args.bucket}_{args.dim}.bin",
        args.words,
        args.bucket,
        args.dim,
        args.seed,
    )
    write_seconds = time.time() - started
    corpus = output / "corpus_small"
    zipf_corpus(corpus, 4000, 2, args.seed)
    table_mb = (args.words + args.bucket) * args.dim * 4 / 2**20
    results = {
        "fasttext_file_mb": round(fasttext.stat().st_size / 2**20, 1),
        "input_matrix_mb": round(table_mb, 1),
        "write_seconds": round(write_seconds, 1),
    }
    for name, devices in (("one_process", None), ("two_workers", [-1, -1])):
        settings = {
            "fasttext_path": str(fasttext),
            "embedding_dim": args.dim,
            "train_data_path": str(corpus / "news.en-*"),
            "projection_dim": 16,
            "cell_dim": 64,
            "batch_size": 32,
            "num_epochs": 1,
            "max_sequence_length": 50,
            "learning_rate": 0.003,
            "warmup_steps": 10,
            "decay_start": 100,
            "decay_end": 1000,
            "num_replicas": 1,
        }
        if devices is not None:
            settings["cuda_devices"] = devices
        config = output / f"fasttext_{name}.jsonnet"
        _write_config(config, settings)
        results[name] = _train(config, output / f"run_fasttext_{name}")
        print(json.dumps({name: results[name]}), flush=True)
    # The dictionary each process parses (Python objects): anonymous memory before and after.
    probe = _PROBE % (str(fasttext),)
    probe_output = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
        ),
    ).stdout.split()
    results["dictionary_anonymous_mb_per_process"] = round(int(probe_output[0]) / 1024, 1)
    results["table_pages_resident_after_parse_mb"] = round(int(probe_output[1]) / 1024, 1)
    results["dictionary_parse_seconds"] = round(float(probe_output[2]), 1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["corpus", "fasttext"])
    parser.add_argument("--output-dir", default="scale_memory_output")
    parser.add_argument("--sentences", type=int, default=20000)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--bucket", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    output = Path(args.output_dir).resolve()
    output.mkdir(parents=True, exist_ok=True)
    results = corpus_mode(args, output) if args.mode == "corpus" else fasttext_mode(args, output)
    (output / f"memory_{args.mode}.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
