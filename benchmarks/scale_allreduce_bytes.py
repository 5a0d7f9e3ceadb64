#!/usr/bin/env python
"""
Gradient all-reduce volume per training step: ELMo-C's continuous output layer against ELMo's
sampled softmax (`sampled_softmax` head, training_configs/pretrain/sampled_softmax.jsonnet).

DDP all-reduces the gradient of every trainable parameter every step (dense gradients; the
frozen fastText table is not a parameter and is never communicated), so the volume per step is
the trainable parameters' bytes. The script

1. counts it for the paper-size models (built on the meta device: no memory is allocated):
   ELMo-C, one direction of ELMo-C (a `directions: 'forward'` job), and "Sampled" at the
   793,471-word One Billion Word vocabulary;
2. measures it in real 2-worker runs (gloo, CPU) of a small ELMo-C and a small sampled-softmax
   model with the same encoder, with the counting DDP communication hook of
   `allreduce_step_log.py`, and checks it against the count.

    python -m benchmarks.scale_allreduce_bytes [--output-dir allreduce_output]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import torch
from elmoc_allennlp.common import torch_versions

from benchmarks.common import random_fasttext, zipf_corpus

REPO_ROOT = Path(__file__).resolve().parents[1]
PRETRAIN = REPO_ROOT / "training_configs" / "pretrain"


def _trainable_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def paper_size_counts(fasttext: Path) -> Dict[str, Dict[str, float]]:
    from allennlp.common import Params
    from allennlp.common.util import import_module_and_submodules
    from allennlp.data import Vocabulary
    from allennlp.models import Model

    import_module_and_submodules("elmoc_allennlp")  # as --include-package: every head
    ext_vars = {
        "ELMOC_FASTTEXT": str(fasttext),
        "ELMOC_TRAIN_DATA": "unused",
        "ELMOC_VALIDATION_DATA": "unused",
    }
    results = {}
    for name, config, overrides, vocabulary_size in (
        ("ELMo-C (continuous, 300-d)", "elmoc.jsonnet", {}, None),
        (
            "ELMo-C, one direction (directions: forward)",
            "elmoc.jsonnet",
            {"model.directions": "forward"},
            None,
        ),
        ("Sampled softmax, 793,471 words", "sampled_softmax.jsonnet", {}, 793471),
    ):
        params = Params.from_file(str(PRETRAIN / config), json.dumps(overrides), ext_vars=ext_vars)
        vocab = Vocabulary.empty()
        if vocabulary_size is not None:
            vocab = Vocabulary()
            # A padded namespace: padding + OOV + the words.
            vocab.add_tokens_to_namespace([f"w{i}" for i in range(vocabulary_size - 2)], "targets")
        with torch_versions.meta_device():
            model = Model.from_params(vocab=vocab, params=params["model"])
        size = _trainable_bytes(model)
        results[name] = {
            "trainable_parameters_M": round(size / 4 / 1e6, 2),
            "allreduce_MB_per_step": round(size / 1e6, 1),
            "of_which_output_layer_MB": round(_trainable_bytes(model.output_layer()) / 1e6, 2),
        }
        print(name, results[name], flush=True)
    return results


def measured_runs(output: Path, fasttext: Path) -> Dict[str, Dict[str, float]]:
    from elmoc_allennlp.training.step_log_callback import read_step_log

    (corpus,) = zipf_corpus(output / "corpus", 1280, 1, lengths=(5, 25))
    common = {
        "fasttext_path": str(fasttext),
        "embedding_dim": 16,
        "train_data_path": str(corpus),
        "projection_dim": 64,
        "cell_dim": 256,
        "batch_size": 32,
        "num_epochs": 1,
        "learning_rate": 0.003,
        "warmup_steps": 10,
        "decay_start": 100,
        "decay_end": 1000,
        "num_replicas": 2,
        "cuda_devices": [-1, -1],
    }
    step_log = " + {trainer+: {callbacks: [{type: 'elmoc_allreduce_step_log'}]}}"
    runs = {
        "ELMo-C (continuous)": (
            f"(import {json.dumps(str(PRETRAIN / 'elmoc.libsonnet'))}).config({json.dumps(common)})"
        ),
        "Sampled softmax": (
            f"(import {json.dumps(str(PRETRAIN / 'baselines.libsonnet'))})"
            f".variant('sampled', {json.dumps(dict(common, num_samples=512))})"
        ),
    }
    results = {}
    for name, jsonnet in runs.items():
        slug = "continuous" if "ELMo-C" in name else "sampled"
        config = output / f"{slug}.jsonnet"
        config.write_text(jsonnet + step_log + "\n")
        run = output / f"run_{slug}"
        if run.exists():
            shutil.rmtree(run)
        command = [sys.executable, "-m", "allennlp", "train", str(config), "-s", str(run)]
        command += [
            "--include-package",
            "elmoc_allennlp",
            "--include-package",
            "benchmarks.allreduce_step_log",
        ]
        command += ["--file-friendly-logging"]
        python_path = str(REPO_ROOT)
        environment = dict(os.environ, PYTHONPATH=python_path, OMP_NUM_THREADS="1")
        with open(str(run) + ".log", "wb") as log:
            subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment, check=True
            )
        per_rank = []
        for rank in (0, 1):
            records = read_step_log(str(run / f"step_log_w{rank}.jsonl"))
            start = next(r for r in records if r.get("event") == "start")
            steps = [r for r in records if "allreduce_bytes" in r]
            per_rank.append((start["trainable_parameter_bytes"], steps))
        counted = per_rank[0][0]
        measured = sorted({r["allreduce_bytes"] for _, steps in per_rank for r in steps})
        results[name] = {
            "trainable_parameters": counted // 4,
            "counted_bytes_per_step": counted,
            "measured_bytes_per_step_by_hook": measured,
            "steps_per_worker": [len(steps) for _, steps in per_rank],
            "hook_equals_count": measured == [counted],
        }
        print(name, results[name], flush=True)
    continuous = results["ELMo-C (continuous)"]["counted_bytes_per_step"]
    sampled = results["Sampled softmax"]["counted_bytes_per_step"]
    results["ratio_sampled_over_continuous"] = round(sampled / continuous, 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default="allreduce_output")
    parser.add_argument("--skip-runs", action="store_true", help="only the paper-size counts")
    args = parser.parse_args()
    output = Path(args.output_dir).resolve()
    output.mkdir(parents=True, exist_ok=True)

    from benchmarks.common import write_fasttext_bin

    small = random_fasttext(output / "small.bin", 5001, 20000, 16, maxn=5)
    # Only the header (dim 300) matters for building the paper-size models on the meta device.
    header_only = write_fasttext_bin(
        output / "dim300.bin",
        ["</s>"],
        np.zeros((1 + 10, 300), dtype=np.float32),
        minn=3,
        maxn=6,
        bucket=10,
    )
    results = {"paper_size": paper_size_counts(header_only)}
    if not args.skip_runs:
        results["measured_two_workers"] = measured_runs(output, small)
    (output / "allreduce_bytes.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
