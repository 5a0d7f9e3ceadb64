#!/usr/bin/env python
"""
Crash-safety soak test for ELMo-C pretraining (not a unit test: it takes minutes).

Starts `allennlp train` on a small synthetic corpus with the real pretraining config builder
(training_configs/pretrain/elmoc.libsonnet: `elmoc_atomic` checkpointer, step log), kills the
whole process group with SIGKILL at a random moment N times, resuming each time with
`allennlp train --recover`, then lets the run finish. After every kill it audits the
serialization directory: every checkpoint, `best.th`, `model.tar.gz`, `config.json` and metrics
file present under its real name must load completely (temporary `.*.partial-*` files may be
left by a kill; the next start removes them). At the end the archive must load, every training
step must have been done, and the steps lost per kill (done again after resuming) must not exceed
the checkpoint interval.

    python -m scripts.soak_test --kills 20 [--distributed] [--output-dir soak_output]

Exit status 0 when every check passed; a JSON report is written to OUTPUT_DIR/report.json.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from benchmarks.common import random_fasttext, zipf_corpus

REPO_ROOT = Path(__file__).resolve().parents[1]


def write_config(path: Path, fasttext: Path, corpus: Path, args: argparse.Namespace) -> None:
    settings = {
        "fasttext_path": str(fasttext),
        "embedding_dim": 16,
        "train_data_path": str(corpus / "news.en-*"),
        "projection_dim": 16,
        "cell_dim": 64,
        "batch_size": args.batch_size,
        "num_epochs": args.epochs,
        "learning_rate": 0.003,
        "warmup_steps": 20,
        "decay_start": 100,
        "decay_end": 1000,
        "num_replicas": 1,
        "checkpoint_every_num_batches": args.checkpoint_every,
        "keep_checkpoints": 2,
        "step_log": True,
    }
    if args.distributed:
        settings["cuda_devices"] = [-1, -1]
    libsonnet = REPO_ROOT / "training_configs" / "pretrain" / "elmoc.libsonnet"
    path.write_text(
        f"(import {json.dumps(str(libsonnet))}).config({json.dumps(settings, indent=2)})\n"
    )


# ------------------------------------------------------------------------------------- audits


def audit(run: Path) -> Dict[str, Any]:
    """Every file under a real name must be complete. Returns what was found."""
    import torch

    found: Dict[str, Any] = {"checkpoints": [], "partial_files": [], "problems": []}
    if not run.exists():
        return found
    for path in sorted(run.iterdir()):
        name = path.name
        try:
            if ".partial-" in name:
                found["partial_files"].append(name)
            elif name.endswith(".th"):
                torch.load(path, map_location="cpu")
                if name.startswith("model_state_"):
                    found["checkpoints"].append(name)
            elif name == "model.tar.gz":
                with tarfile.open(path, "r:gz") as archive:
                    for member in archive.getmembers():
                        if member.isfile():
                            archive.extractfile(member).read()
                found["archive"] = True
            elif name.endswith(".json"):
                json.loads(path.read_text())
        except Exception as error:  # a half-written file
            found["problems"].append(f"{name}: {type(error).__name__}: {error}")
    return found


def read_steps(run: Path) -> List[Dict[str, Any]]:
    from elmoc_allennlp.training.step_log_callback import read_step_log

    path = run / "step_log_w0.jsonl"
    return read_step_log(str(path)) if path.exists() else []


# ---------------------------------------------------------------------------------- the soak


def start_training(config: Path, run: Path, log) -> subprocess.Popen:
    command = [sys.executable, "-m", "allennlp", "train", str(config), "-s", str(run)]
    command += ["--include-package", "elmoc_allennlp", "--file-friendly-logging"]
    if (run / "config.json").exists():
        command.append("--recover")
    elif run.exists():
        # Killed before allennlp wrote config.json: there is nothing to recover.
        assert not any(run.glob("*.th")), f"{run} has checkpoints but no config.json"
        shutil.rmtree(run)
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment,
        cwd=str(REPO_ROOT),
        start_new_session=True,  # its own process group: the kill takes workers along
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--output-dir", default="soak_output")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--sentences", type=int, default=6000)
    # Long enough that the run outlives the kills (about 20 s of training per 100 steps here).
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    # Seconds from (re)start to the kill; a restart spends ~10-40 s importing before training.
    parser.add_argument("--min-delay", type=float, default=5.0)
    parser.add_argument("--max-delay", type=float, default=60.0)
    parser.add_argument("--distributed", action="store_true", help="2 CPU workers (gloo)")
    args = parser.parse_args()

    output = Path(args.output_dir).resolve()
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    zipf_corpus(
        output / "corpus", args.sentences, 4, args.seed, vocabulary_size=2000, lengths=(4, 25)
    )
    fasttext = random_fasttext(output / "vectors.bin", 2001, 5000, 16, args.seed, maxn=5)
    config = output / "soak.jsonnet"
    write_config(config, fasttext, output / "corpus", args)
    run = output / "run"
    rng = random.Random(args.seed)
    log = open(output / "training.log", "ab")

    kills: List[Dict[str, Any]] = []
    problems: List[str] = []
    completed_early = False
    half_written = 0
    for kill_number in range(1, args.kills + 1):
        steps_before = len(read_steps(run))
        process = start_training(config, run, log)
        delay = rng.uniform(args.min_delay, args.max_delay)
        try:
            process.wait(timeout=delay)
            completed_early = True
            print(f"training finished before kill {kill_number}; rc={process.returncode}")
            if process.returncode != 0:
                problems.append(f"run {kill_number} exited with {process.returncode}")
            break
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        time.sleep(0.5)  # let the kernel reap the group
        records = read_steps(run)[steps_before:]
        found = audit(run)
        half_written += len(found["problems"])
        problems.extend(f"after kill {kill_number}: {p}" for p in found["problems"])
        starts = [r for r in records if r.get("event") == "start"]
        steps = [r["step"] for r in records if "loss" in r]
        kills.append(
            {
                "kill": kill_number,
                "after_seconds": round(delay, 1),
                "phase": "training" if steps else ("started" if starts else "startup"),
                "resumed_at_step": starts[0]["step"] if starts else None,
                "last_step_done": max(steps) if steps else None,
                "checkpoints": found["checkpoints"],
                "partial_files_left": found["partial_files"],
            }
        )
        print(json.dumps(kills[-1]), flush=True)

    # Resume one last time and let it finish.
    final_rc: Optional[int] = None
    if not completed_early:
        process = start_training(config, run, log)
        final_rc = process.wait()
        if final_rc != 0:
            problems.append(f"final run exited with {final_rc}")
    log.close()

    # Steps lost per kill: done before the kill, done again after resuming.
    all_records = read_steps(run)
    lives: List[List[Dict[str, Any]]] = []
    for record in all_records:
        if record.get("event") == "start":
            lives.append([record])
        elif lives:
            lives[-1].append(record)
    lost = []
    for life, next_life in zip(lives, lives[1:]):
        done = [r["step"] for r in life if "loss" in r]
        last = max(done) if done else life[0]["step"]
        lost.append(max(0, last - next_life[0]["step"]))
    final_steps = {r["step"] for r in all_records if "loss" in r}

    from allennlp.models.archival import load_archive

    import elmoc_allennlp  # noqa: F401

    archive_ok = False
    try:
        archive = load_archive(run / "model.tar.gz")
        archive_ok = archive.model is not None
    except Exception as error:
        problems.append(f"archive does not load: {type(error).__name__}: {error}")
    last_step = max(final_steps) if final_steps else 0
    if final_steps != set(range(1, last_step + 1)):
        problems.append("some training steps were never done")
    # The last epoch's metrics (metrics.json lacks them when the final resume found the training
    # already complete and only archived).
    last_epoch_metrics = run / f"metrics_epoch_{args.epochs - 1}.json"
    metrics = json.loads(last_epoch_metrics.read_text()) if last_epoch_metrics.exists() else {}
    if metrics.get("epoch") != args.epochs - 1:
        problems.append(f"the last epoch's metrics are missing ({last_epoch_metrics.name})")
    if not (run / "metrics.json").exists():
        problems.append("metrics.json is missing")
    if lost and max(lost) > args.checkpoint_every:
        problems.append(
            f"a kill lost {max(lost)} steps > checkpoint interval {args.checkpoint_every}"
        )

    report = {
        "kills_requested": args.kills,
        "kills_survived": len(kills),
        "kills_during_training": sum(k["phase"] == "training" for k in kills),
        "distributed": args.distributed,
        "checkpoint_every_num_batches": args.checkpoint_every,
        "final_exit_code": final_rc,
        "total_steps": last_step,
        "steps_lost_per_kill": lost,
        "max_steps_lost": max(lost) if lost else 0,
        "half_written_files_found": half_written,
        "partial_files_left_by_kills": sum(len(k["partial_files_left"]) for k in kills),
        "archive_loads": archive_ok,
        "final_training_loss": metrics.get("training_loss"),
        "problems": problems,
        "kills": kills,
    }
    (output / "report.json").write_text(json.dumps(report, indent=2))
    summary = {k: v for k, v in report.items() if k != "kills"}
    print(json.dumps(summary, indent=2))
    print("SOAK PASSED" if not problems else "SOAK FAILED")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
