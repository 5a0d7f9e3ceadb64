#!/usr/bin/env python
"""
Mixed-precision pretraining against float32 (issue #51): the same ELMo-C config pretrained once per
`trainer.precision` through `allennlp train` (the same seed, data and schedule), each run's
training loss per step (`elmoc_step_log`) and its final validation loss (`allennlp evaluate`, in
float32, what the archive gives downstream); writes `results.json` and `results.md` (the loss
curves side by side at tenths of the run, the final losses and their relative difference) to
`--output-dir`. Resumable: finished runs and evaluations are kept.

On a CPU without native bfloat16 the bfloat16 run sets `ELMOC_EMULATE_BFLOAT16`: bfloat16's
numerics (what this study measures) without its speed; `results.md` says which it was, and its
times are then no speed figure (`benchmarks/precision.py` measures speed).

With `--downstream`, also the downstream side, UD English-EWT POS tagging (the equal-compute
study's `ud_pos_tagger.jsonnet`, task data from `--task-data-dir`) with the pretrained float32 biLM
frozen, per seed: as trained (`float32`), the frozen biLM quantized (`dtype` int8), and the tagger
trained with `trainer.precision` bfloat16 (the frozen biLM stays at its float32 `dtype`);
accuracy mean ± std over the seeds.

    python -m examples.mixed_precision.run_study --data-dir quickstart_output \\
        --output-dir runs/mixed_precision --downstream --task-data-dir ../shared/data
"""

import argparse
import json
import os
import shutil
import statistics
from argparse import Namespace
from pathlib import Path
from typing import Any, Dict, List

from benchmarks.common import machine_description, run_logged
from elmoc_allennlp.common.precision import EMULATE_BFLOAT16, cpu_flags, native_bfloat16
from examples.common import (
    ALLENNLP,
    DEFAULT_DATA,
    REPO_ROOT,
    evaluate_bilm,
    log,
    prepare_data,
    run_one,
    seconds_of,
    write_json,
    write_text,
)

PRECISIONS = ("float32", "bfloat16")
CONFIG = REPO_ROOT / "training_configs" / "pretrain" / "elmoc_small.jsonnet"


def pretrain(precision: str, args, environment: Dict[str, str]) -> Dict[str, Any]:
    """One `allennlp train` at `precision` (kept once finished); its record."""
    run_dir = args.output_dir / precision
    archive = run_dir / "model.tar.gz"
    if not archive.exists():
        if run_dir.exists():  # an interrupted run starts again
            shutil.rmtree(run_dir)
        overrides = {
            "trainer.precision": precision,
            "trainer.callbacks": [{"type": "elmoc_step_log"}],
        }
        if args.epochs is not None:
            overrides["trainer.num_epochs"] = args.epochs
        command = [str(ALLENNLP), "train", str(args.config), "-s", str(run_dir)]
        command += ["--include-package", "elmoc_allennlp", "-o", json.dumps(overrides)]
        log(f"pretraining at {precision} -> {run_dir}")
        run_logged(command, args.output_dir / f"{precision}.train.log", environment)
    steps = [
        json.loads(line)
        for line in (run_dir / "step_log_w0.jsonl").read_text().splitlines()
        if line.strip()
    ]
    losses = [step["loss"] for step in steps if "loss" in step]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    evaluation = evaluate_bilm(str(archive), args.data_dir / "data" / "ptb.valid.txt", environment)
    return {
        "precision": precision,
        "training_seconds": seconds_of(metrics["training_duration"]),
        "steps": len(losses),
        "step_losses": losses,
        "trainer_validation_loss": metrics["best_validation_loss"],
        "validation_loss": evaluation["loss"],
    }


# Why the bfloat16 training variant needs native units: emulation cannot stand in for them there.
NEEDS_UNITS = (
    "not run: the tagger's encoder, torch's nn.LSTM, runs under CPU bfloat16 autocast as a oneDNN "
    "bfloat16 primitive, which oneDNN cannot create without the CPU's bfloat16 units"
)


def downstream(args, archive: Path, native: bool) -> Dict[str, Any]:
    """The POS grid: each variant's runs (kept once finished) and accuracy mean and std; the
    bfloat16 training variant where the CPU has native bfloat16 (`NEEDS_UNITS`)."""
    from elmoc_allennlp.downstream.archive import BilmArchive
    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    fasttext = args.data_dir / "fasttext" / "ptb.bin"
    # name -> (overrides, whether it needs the CPU's bfloat16 units)
    variants = {
        "float32": ({}, False),
        "frozen biLM int8": (
            {"model.text_field_embedder.token_embedders.elmo.dtype": "int8"},
            False,
        ),
        "bfloat16 training": (
            {"trainer.type": "elmoc_checked_gradient_descent", "trainer.precision": "bfloat16"},
            True,
        ),
    }
    dim = BilmArchive.open(str(archive)).output_dim
    grid = Namespace(
        tasks=["pos"],
        data_dir=args.task_data_dir,
        output_dir=args.output_dir / "downstream",
        train_size=args.train_size,
        dev_size=None,
        eval_size=args.eval_size,
        epochs=args.task_epochs,
        task_epochs={},
        batch_size=args.task_batch_size,
        lowercase=True,  # the quickstart's fastText and biLM are lowercased
        collect_only=False,
        fasttext=fasttext,
        fasttext_dim=FastTextVectors.from_path(str(fasttext)).dim,
        bilm_dims={name: dim for name in variants},
    )
    data = prepare_data(grid)
    results: Dict[str, Any] = {}
    for name, (overrides, needs_units) in variants.items():
        if needs_units and not native:
            results[name] = {"not_run": NEEDS_UNITS}
            continue
        runs = [
            run_one("pos", name, str(archive), seed, grid, data, overrides) for seed in args.seeds
        ]
        tests = [run["test"] for run in runs]
        results[name] = {
            "runs": runs,
            "test_mean": statistics.mean(tests),
            "test_std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
        }
    return results


def curve(losses: List[float], points: int = 10) -> List[float]:
    """The mean training loss of each tenth of the run."""
    size = max(1, len(losses) // points)
    return [
        sum(losses[i * size : (i + 1) * size]) / len(losses[i * size : (i + 1) * size])
        for i in range(points)
        if losses[i * size : (i + 1) * size]
    ]


def markdown(document: Dict[str, Any]) -> str:
    runs = {run["precision"]: run for run in document["runs"]}
    reference = runs["float32"]["validation_loss"]
    lines = [
        "# Mixed-precision pretraining against float32",
        "",
        f"`{document['command']}` on {document['cpu']}; each run at OMP_NUM_THREADS="
        f"{document['threads']}; CPU bfloat16 flags: {document['cpu_bfloat16_flags']}; config "
        f"`{document['config']}` on {document.get('train_data', 'PTB train')}, validation on "
        f"all of PTB valid. bfloat16: {document['bfloat16']}.",
        "",
        "| precision | steps | validation loss (`allennlp evaluate`, float32) | relative to float32 "
        "| validation loss in training | training time |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        relative = (run["validation_loss"] - reference) / reference
        lines.append(
            f"| {name} | {run['steps']} | {run['validation_loss']:.4f} | {relative:+.2%} "
            f"| {run['trainer_validation_loss']:.4f} | {run['training_seconds'] / 60:.1f} min |"
        )
    lines += [
        "",
        "Training loss, mean of each tenth of the run:",
        "",
        "| tenth | " + " | ".join(runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    curves = {name: curve(run["step_losses"]) for name, run in runs.items()}
    for index in range(min(len(c) for c in curves.values())):
        cells = " | ".join(f"{curves[name][index]:.4f}" for name in runs)
        lines.append(f"| {index + 1} | {cells} |")
    if "emulated" in document["bfloat16"]:
        lines += ["", "The bfloat16 run was emulated: its time is no speed figure."]
    if document.get("downstream"):
        settings = document["downstream_settings"]
        lines += [
            "",
            f"Downstream: UD English-EWT POS ({settings}), the float32 biLM frozen; test accuracy "
            "over seeds " + ", ".join(str(seed) for seed in document["seeds"]) + ":",
            "",
            "| variant | test accuracy (mean ± std) | per seed | difference to float32 |",
            "|---|---|---|---|",
        ]
        reference = document["downstream"]["float32"]["test_mean"]
        for name, result in document["downstream"].items():
            if "not_run" in result:
                lines.append(f"| {name} | {result['not_run']} | | |")
                continue
            seeds = ", ".join(f"{100 * run['test']:.2f}" for run in result["runs"])
            lines.append(
                f"| {name} | {100 * result['test_mean']:.2f} ± {100 * result['test_std']:.2f} "
                f"| {seeds} | {100 * (result['test_mean'] - reference):+.2f} |"
            )
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("quickstart_output"),
        help="the quickstart's output: data/ptb.{train,valid}.txt and fasttext/ptb.bin",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs/mixed_precision"))
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--epochs", type=int, default=None, help="override num_epochs")
    parser.add_argument(
        "--train-sentences",
        type=int,
        default=None,
        help="pretrain on the first N sentences of ptb.train.txt (default: all)",
    )
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run")
    parser.add_argument("--downstream", action="store_true", help="also the POS grid")
    parser.add_argument("--task-data-dir", type=Path, default=DEFAULT_DATA, help="ud_ewt/ inside")
    parser.add_argument("--train-size", type=int, default=1000, help="POS training sentences")
    parser.add_argument("--eval-size", type=int, default=500, help="POS dev and test sentences")
    parser.add_argument("--task-epochs", type=int, default=6)
    parser.add_argument("--task-batch-size", type=int, default=16, help="POS batch size")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    native, evidence = native_bfloat16("cpu")
    train_data = args.data_dir / "data" / "ptb.train.txt"
    if args.train_sentences is not None:
        with open(train_data, encoding="utf-8") as source:
            lines = [line for _, line in zip(range(args.train_sentences), source)]
        train_data = args.output_dir / f"ptb.train.first{args.train_sentences}.txt"
        write_text(train_data, "".join(lines))
    environment = dict(
        os.environ,
        ELMOC_FASTTEXT=str(args.data_dir / "fasttext" / "ptb.bin"),
        ELMOC_TRAIN_DATA=str(train_data),
        ELMOC_VALIDATION_DATA=str(args.data_dir / "data" / "ptb.valid.txt"),
        OMP_NUM_THREADS=str(args.threads),
    )
    emulate = {} if native else {EMULATE_BFLOAT16: "1"}
    runs = []
    for precision in PRECISIONS:
        run_environment = dict(environment, **(emulate if precision == "bfloat16" else {}))
        runs.append(pretrain(precision, args, run_environment))
    flags = " ".join(sorted(flag for flag in cpu_flags() if "bf16" in flag or "amx" in flag))
    document = {
        "command": "python -m examples.mixed_precision.run_study",
        "cpu": machine_description(),
        "cpu_bfloat16_flags": flags or "none",
        "threads": args.threads,
        "config": str(args.config.relative_to(REPO_ROOT)),
        "train_data": (
            "all of PTB train"
            if args.train_sentences is None
            else f"the first {args.train_sentences} sentences of PTB train"
        ),
        "bfloat16": evidence if native else f"emulated ({evidence})",
        "runs": runs,
    }
    if args.downstream:
        archive = args.output_dir / "float32" / "model.tar.gz"
        document["downstream"] = downstream(args, archive, native)
        document["downstream_settings"] = (
            f"{args.train_size} training and {args.eval_size} dev and test sentences, "
            f"{args.task_epochs} epochs of batches of {args.task_batch_size}"
        )
        document["seeds"] = args.seeds
    write_json(args.output_dir / "results.json", document)
    write_text(args.output_dir / "results.md", markdown(document))
    print(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
