#!/usr/bin/env python
"""
ELMo vs ELMo-C downstream, through the project's own configs: for every task, model and seed it
runs `allennlp train` on a downstream config (training_configs/downstream/, and this folder's
`ud_pos_tagger.jsonnet` with its reader, `--include-package examples.equal_compute_study`; with
`evaluate_on_test`, i.e. `allennlp evaluate`'s evaluation of the best-dev-epoch weights on the test
set), then writes `results.json` and a Markdown table (mean +- std over seeds) to `--output-dir`.

    task   config                        metric
    ner    ner_crf_tagger.jsonnet        span F1 (CoNLL-2003 eng.train / testa / testb)
    sst5   sst5_bcn.jsonnet              accuracy (SST-5 train / dev / test, whole sentences)
    pos    ud_pos_tagger.jsonnet         UPOS accuracy (UD English-EWT train / dev / test)

and models `fasttext` (no biLM: ELMOC_ARCHIVE=''), and one per `--bilm NAME=ARCHIVE` (any biLM
archive: ELMo-C's fastText input, ELMo's character CNN, ...). Every model gets the same frozen
fastText vectors (`--fasttext`). The first `--train-size` / `--eval-size` examples of each split
are used (a fixed random sample for SST, whose files are sorted by label; the same for every
run). A run whose serialization directory has a `metrics.json` is
not run again, so an interrupted study resumes where it stopped; pretraining rows are read from
`--pretrain NAME=SERIALIZATION_DIR` (metrics.json, config.json, model.tar.gz).

    OMP_NUM_THREADS=1 python examples/equal_compute_study/run_study.py --fasttext ptb.bin --lowercase \\
        --bilm ELMo=runs/elmo/model.tar.gz --bilm ELMo-C=runs/elmoc/model.tar.gz \\
        --pretrain ELMo=runs/elmo --pretrain ELMo-C=runs/elmoc --pretrain-tokens ptb.train.txt \\
        --data-dir ../shared/data --train-size 500 --eval-size 300 --epochs 4 --seeds 3 --jobs 2
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

STUDY_DIR = Path(__file__).resolve().parent
REPO_ROOT = STUDY_DIR.parents[1]
CONFIGS = REPO_ROOT / "training_configs" / "downstream"
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
ALLENNLP = Path(sys.executable).with_name("allennlp")
sys.path.insert(0, str(REPO_ROOT))

from examples.reporting import log, mean_std, write_text  # noqa: E402

# task -> (config, environment variable prefix, data folder, split files, metric, metric name)
TASKS = {
    "ner": ("ner_crf_tagger.jsonnet", "NER", "conll2003",
            ("eng.train", "eng.testa", "eng.testb"), "f1-measure-overall", "NER F1"),
    "sst5": ("sst5_bcn.jsonnet", "SST", "sst5",
             ("train.txt", "dev.txt", "test.txt"), "accuracy", "SST-5 acc"),
    "pos": (str(STUDY_DIR / "ud_pos_tagger.jsonnet"), "POS", "ud_ewt",
            ("en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu", "en_ewt-ud-test.conllu"),
            "accuracy", "POS acc"),
}
SPLITS = ("TRAIN", "VALIDATION", "TEST")
FASTTEXT_ONLY = "fastText"


# ---------------------------------------------------------------------- data subsets

def _blocks(path: Path, task: str) -> Tuple[List[str], List[str]]:
    """(header lines, examples) of a split: a line per SST tree, a blank-line block otherwise."""
    text = path.read_text(encoding="utf-8")
    if task == "sst5":
        return [], [line for line in text.splitlines() if line.strip()]
    blocks = [block for block in text.split("\n\n") if block.strip()]
    if task == "ner":
        # CoNLL-2003: keep sentences, not the -DOCSTART- blocks.
        blocks = [block for block in blocks if not block.lstrip().startswith("-DOCSTART-")]
    return [], blocks


def make_subset(source: Path, target: Path, task: str, size: Optional[int]) -> None:
    if target.exists():
        return
    _, examples = _blocks(source, task)
    chosen = examples
    if size is not None and size < len(examples):
        if task == "sst5":
            # The SST files are sorted by label: a fixed random sample, in file order.
            keep = sorted(random.Random(0).sample(range(len(examples)), size))
            chosen = [examples[index] for index in keep]
        else:
            # CoNLL-2003 and UD files are in document order: the first sentences.
            chosen = examples[:size]
    separator = "\n" if task == "sst5" else "\n\n"
    write_text(target, separator.join(block.strip("\n") for block in chosen) + "\n")


def prepare_data(args) -> Dict[str, Dict[str, Path]]:
    paths: Dict[str, Dict[str, Path]] = {}
    for task in args.tasks:
        _, _, folder, files, _, _ = TASKS[task]
        target_dir = args.output_dir / "data" / task
        target_dir.mkdir(parents=True, exist_ok=True)
        paths[task] = {}
        for split, name in zip(SPLITS, files):
            size = {"TRAIN": args.train_size, "VALIDATION": args.dev_size or args.eval_size}.get(split, args.eval_size)
            target = target_dir / name
            make_subset(args.data_dir / folder / name, target, task, size)
            paths[task][split] = target
    return paths


# ---------------------------------------------------------------------- runs

def overrides(task: str, seed: int, args, use_bilm: bool) -> Dict:
    result = {
        "random_seed": seed,
        "numpy_seed": seed,
        "pytorch_seed": seed,
        "trainer.num_epochs": args.task_epochs.get(task, args.epochs),
        "trainer.patience": None,
        "trainer.checkpointer": {"keep_most_recent_by_count": 1},
    }
    if args.batch_size:
        key = "data_loader.batch_sampler.batch_size" if task == "sst5" else "data_loader.batch_size"
        result[key] = args.batch_size
    if args.lowercase:
        # The fastText model (and a biLM) trained on lowercased text.
        result["dataset_reader.token_indexers.tokens.lowercase_tokens"] = True
        if use_bilm:
            key = "elmoc" if task == "sst5" else "elmo"
            result[f"dataset_reader.token_indexers.{key}.lowercase_tokens"] = True
    if task == "sst5":
        # Whole sentences only (not every phrase of the trees): the budget of this study.
        result["dataset_reader.use_subtrees"] = False
        if args.lowercase:
            for key in ["tokens"] + (["elmoc"] if use_bilm else []):
                result[f"validation_dataset_reader.token_indexers.{key}.lowercase_tokens"] = True
    return result


class RunElsewhere(Exception):
    pass


def take_lock(lock: Path) -> bool:
    """
    A run's lock file (holding the driver's pid), so that several drivers can share a grid. A lock
    is stale when its driver is gone and the run's log has not grown for two minutes (a run keeps
    going if only its driver was stopped).
    """
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            os.kill(int(lock.read_text() or 0), 0)
            return False  # its driver is alive
        except (ProcessLookupError, ValueError):
            log_file = lock.with_suffix(".log")
            if log_file.exists() and time.time() - log_file.stat().st_mtime < 120:
                return False  # its run is still writing
            lock.unlink()
            return take_lock(lock)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(str(os.getpid()))
    return True


def run_one(task: str, model: str, archive: Optional[str], seed: int, args, data) -> Dict:
    config, prefix, _, _, metric, _ = TASKS[task]
    run_dir = args.output_dir / "runs" / task / model / f"seed{seed}"
    metrics_path = run_dir / "metrics.json"
    if not metrics_path.exists() and args.collect_only:
        raise RunElsewhere(f"{task} {model} seed {seed} has not finished (--collect-only)")
    if not metrics_path.exists():
        lock = run_dir.parent / f"seed{seed}.lock"
        if not take_lock(lock):
            raise RunElsewhere(f"{task} {model} seed {seed} is running in another process ({lock})")
        if run_dir.exists():
            shutil.rmtree(run_dir)  # an interrupted run: start it again
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        environment = dict(os.environ)
        environment.update({
            "ELMOC_ARCHIVE": archive or "",
            "ELMOC_DIM": str(args.bilm_dims.get(model, 0)),
            "ELMOC_FASTTEXT": str(args.fasttext),
            "ELMOC_FASTTEXT_DIM": str(args.fasttext_dim),
            "OMP_NUM_THREADS": environment.get("OMP_NUM_THREADS", "1"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")])),
        })
        for split in SPLITS:
            environment[f"{prefix}_{split}_DATA_PATH"] = str(data[task][split])
        command = [
            str(ALLENNLP), "train", str(CONFIGS / config), "-s", str(run_dir),
            "--include-package", "elmoc_allennlp", "--include-package", "examples.equal_compute_study",
            "-o", json.dumps(overrides(task, seed, args, archive is not None)),
        ]
        log(f"start {task} {model} seed {seed}")
        started = time.time()
        run_dir.parent.joinpath(f"seed{seed}.log").parent.mkdir(parents=True, exist_ok=True)
        with open(run_dir.parent / f"seed{seed}.log", "w") as output:
            completed = subprocess.run(command, env=environment, stdout=output, stderr=subprocess.STDOUT)
        if completed.returncode != 0 or not metrics_path.exists():
            lock.unlink()
            raise RuntimeError(
                f"{task} {model} seed {seed} failed; see {run_dir.parent / f'seed{seed}.log'}"
            )
        log(f"done  {task} {model} seed {seed} in {time.time() - started:.0f} s")
        lock.unlink()
    metrics = json.loads(metrics_path.read_text())
    return {
        "task": task, "model": model, "seed": seed,
        "dev": metrics[f"best_validation_{metric}"],
        "test": metrics[f"test_{metric}"],
        "best_epoch": metrics.get("best_epoch"),
        "training_duration": metrics.get("training_duration"),
    }


# ---------------------------------------------------------------------- pretraining rows

def _seconds(duration: str) -> float:
    hours, minutes, seconds = duration.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def pretraining_row(name: str, serialization_dir: Path, num_tokens: Optional[int]) -> Dict:
    sys.path.insert(0, str(REPO_ROOT))
    import elmoc_allennlp  # noqa: F401
    from allennlp.models.archival import load_archive

    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    model = load_archive(str(serialization_dir / "model.tar.gz")).model
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    seconds = _seconds(metrics["training_duration"])
    row = {
        "model": name,
        "trainable_parameters": parameters,
        "epochs": metrics.get("epoch", 0) + 1,
        "pretraining_minutes": round(seconds / 60, 1),
        "tokens_per_second": round(num_tokens * (metrics.get("epoch", 0) + 1) / seconds) if num_tokens else None,
        "validation_loss": metrics.get("validation_loss"),
    }
    if "validation_cosine_similarity" in metrics:
        row["intrinsic"] = (
            f"valid 1-cos {metrics['validation_loss']:.4f}, "
            f"retrieval acc {metrics['validation_retrieval_accuracy']:.3f}"
        )
    else:
        row["intrinsic"] = f"valid perplexity {math.exp(metrics['validation_loss']):.1f}"
    return row


def pretraining_token_files(names: List[str], values: List[str]) -> Dict[str, Optional[str]]:
    """
    The text each pretraining run read, from `--pretrain-tokens` values: one `PATH` for every
    run, and/or `NAME=PATH` for one run (which wins). None where no file is given.
    """
    named = _pairs([value for value in values if "=" in value], "--pretrain-tokens")
    shared = [value for value in values if "=" not in value]
    if len(shared) > 1:
        raise SystemExit("--pretrain-tokens: give one PATH for every model, or NAME=PATH")
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise SystemExit(f"--pretrain-tokens names {unknown}, which no --pretrain gives")
    return {name: named.get(name, shared[0] if shared else None) for name in names}


def count_tokens(path: Optional[str]) -> Optional[int]:
    if path is None:
        return None
    with open(path, encoding="utf-8") as text:
        return sum(len(line.split()) for line in text)


# ---------------------------------------------------------------------- table

def table(results: Dict) -> str:
    tasks = results["settings"]["tasks"]
    pretraining = {row["model"]: row for row in results["pretraining"]}
    header = ["model", "pretraining min", "params", "tokens/s", "intrinsic (PTB valid)"]
    for task in tasks:
        header += [f"{TASKS[task][5]} dev", f"{TASKS[task][5]} test"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model in results["settings"]["models"]:
        row = pretraining.get(model, {})
        cells = [
            model,
            str(row.get("pretraining_minutes", "-")),
            f"{row['trainable_parameters']:,}" if row else "-",
            f"{row['tokens_per_second']:,}" if row.get("tokens_per_second") else "-",
            row.get("intrinsic", "-"),
        ]
        for task in tasks:
            runs = [r for r in results["runs"] if r["task"] == task and r["model"] == model]
            cells += [mean_std([r["dev"] for r in runs], digits=1), mean_std([r["test"] for r in runs], digits=1)]
            if runs and len(runs) < len(results["settings"]["seeds"]):
                cells[-1] += f" ({len(runs)} seeds)"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- main

def _pairs(values: List[str], option: str) -> Dict[str, str]:
    pairs = {}
    for value in values:
        if "=" not in value:
            raise SystemExit(f"{option} takes NAME=PATH, got {value!r}")
        name, path = value.split("=", 1)
        pairs[name] = path
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fasttext", type=Path, required=True, help="frozen fastText .bin for every model")
    parser.add_argument("--bilm", action="append", default=[], help="NAME=model.tar.gz of a biLM")
    parser.add_argument("--pretrain", action="append", default=[], help="NAME=serialization dir")
    parser.add_argument(
        "--pretrain-tokens", action="append", default=[],
        help="the pretraining text, to count tokens/s: PATH for every --pretrain, or NAME=PATH",
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--output-dir", type=Path, default=Path("runs/equal_compute_study"))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--train-size", type=int, default=500)
    parser.add_argument("--eval-size", type=int, default=300)
    parser.add_argument("--dev-size", type=int, help="dev examples per task (default: --eval-size)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--task-epochs", nargs="*", default=[], help="TASK=EPOCHS for some tasks")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--batch-size", type=int, help="override the configs' batch size")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--collect-only", action="store_true", help="only tabulate finished runs")
    parser.add_argument("--lowercase", action="store_true", help="lowercase task text (fastText/biLM trained lowercased)")
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    args.task_epochs = {task: int(epochs) for task, epochs in _pairs(args.task_epochs, "--task-epochs").items()}

    sys.path.insert(0, str(REPO_ROOT))
    from elmoc_allennlp.downstream.archive import BilmArchive as ElmocArchive
    from elmoc_allennlp.common.fasttext_vectors import FastTextVectors

    args.fasttext_dim = FastTextVectors.from_path(args.fasttext).dim
    bilms = _pairs(args.bilm, "--bilm")
    args.bilm_dims = {name: ElmocArchive(path).output_dim for name, path in bilms.items()}
    models: List[Tuple[str, Optional[str]]] = [(FASTTEXT_ONLY, None)] + list(bilms.items())
    data = prepare_data(args)

    pretrain_dirs = _pairs(args.pretrain, "--pretrain")
    token_files = pretraining_token_files(list(pretrain_dirs), args.pretrain_tokens)
    pretraining = [
        pretraining_row(name, Path(path), count_tokens(token_files[name]))
        for name, path in pretrain_dirs.items()
    ]

    grid = [(task, model, archive, seed) for task in args.tasks for seed in args.seeds
            for model, archive in models]
    runs: List[Dict] = []
    failures: List[str] = []

    def attempt(item):
        try:
            return run_one(*item, args, data)
        except RuntimeError as error:
            failures.append(str(error))
            log(str(error))
            return None
        except RunElsewhere as error:
            log(str(error))
            return None

    def write_results() -> None:
        results = {
            "settings": {
                "tasks": args.tasks, "models": [name for name, _ in models], "seeds": args.seeds,
                "train_size": args.train_size, "eval_size": args.eval_size, "dev_size": args.dev_size, "epochs": args.epochs,
                "task_epochs": args.task_epochs,
                "batch_size": args.batch_size,
                "fasttext": str(args.fasttext), "bilms": bilms, "lowercase": args.lowercase,
            },
            "pretraining": pretraining,
            "runs": sorted(runs, key=lambda r: (r["task"], r["model"], r["seed"])),
            "failures": failures,
        }
        write_text(args.output_dir / "results.json", json.dumps(results, indent=2) + "\n")
        write_text(args.output_dir / "results.md", table(results))

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for result in pool.map(attempt, grid):
            if result is not None:
                runs.append(result)
                write_results()
    # Runs finished meanwhile by other drivers sharing the grid.
    counted = {(r["task"], r["model"], r["seed"]) for r in runs}
    for task, model, archive, seed in grid:
        metrics = args.output_dir / "runs" / task / model / f"seed{seed}" / "metrics.json"
        if (task, model, seed) not in counted and metrics.exists():
            runs.append(run_one(task, model, archive, seed, args, data))
    write_results()
    print(table(json.loads((args.output_dir / "results.json").read_text())))
    if failures:
        raise SystemExit(f"{len(failures)} runs failed: " + "; ".join(failures))


if __name__ == "__main__":
    main()
