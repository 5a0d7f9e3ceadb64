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

    python -m examples.mixed_precision.run_study --data-dir quickstart_output \\
        --output-dir runs/mixed_precision
"""

import argparse
import json
import os
from pathlib import Path
from typing import Any, Dict, List

from benchmarks.common import machine_description, run_logged
from elmoc_allennlp.common.precision import EMULATE_BFLOAT16, cpu_flags, native_bfloat16
from examples.common import ALLENNLP, REPO_ROOT, evaluate_bilm, log, seconds_of, write_json
from examples.common import write_text

PRECISIONS = ("float32", "bfloat16")
CONFIG = REPO_ROOT / "training_configs" / "pretrain" / "elmoc_small.jsonnet"


def pretrain(precision: str, args, environment: Dict[str, str]) -> Dict[str, Any]:
    """One `allennlp train` at `precision` (kept once finished); its record."""
    run_dir = args.output_dir / precision
    archive = run_dir / "model.tar.gz"
    if not archive.exists():
        if run_dir.exists():  # an interrupted run starts again
            for path in sorted(run_dir.rglob("*"), reverse=True):
                path.unlink() if not path.is_dir() else path.rmdir()
            run_dir.rmdir()
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
        f"`{document['config']}`. bfloat16: {document['bfloat16']}.",
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
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    native, evidence = native_bfloat16("cpu")
    environment = dict(
        os.environ,
        ELMOC_FASTTEXT=str(args.data_dir / "fasttext" / "ptb.bin"),
        ELMOC_TRAIN_DATA=str(args.data_dir / "data" / "ptb.train.txt"),
        ELMOC_VALIDATION_DATA=str(args.data_dir / "data" / "ptb.valid.txt"),
        OMP_NUM_THREADS=str(args.threads),
    )
    runs = []
    for precision in PRECISIONS:
        run_environment = dict(environment)
        if precision == "bfloat16" and not native:
            run_environment[EMULATE_BFLOAT16] = "1"
        runs.append(pretrain(precision, args, run_environment))
    flags = " ".join(sorted(flag for flag in cpu_flags() if "bf16" in flag or "amx" in flag))
    document = {
        "command": "python -m examples.mixed_precision.run_study",
        "cpu": machine_description(),
        "cpu_bfloat16_flags": flags or "none",
        "threads": args.threads,
        "config": str(args.config.relative_to(REPO_ROOT)),
        "bfloat16": evidence if native else f"emulated ({evidence})",
        "runs": runs,
    }
    write_json(args.output_dir / "results.json", document)
    write_text(args.output_dir / "results.md", markdown(document))
    print(markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
