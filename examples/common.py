"""
What the study drivers share, written once: progress lines, `mean ± std` cells, atomic result
files, allennlp's durations and token counts, the intrinsic evaluation of a biLM archive, and the
downstream grid (tasks, data subsets, one `allennlp train` per task, model and seed, shareable
between drivers through lock files) that the equal-compute and quality-vs-time studies run.
Commands run through `benchmarks.common.run_logged`. The drivers run as modules from the
repository root (`python -m examples.quality_vs_time.run_study`).
"""

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from benchmarks.common import run_logged
from elmoc_allennlp.common.atomic_files import atomic_write

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS = REPO_ROOT / "training_configs" / "downstream"
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
ALLENNLP = Path(sys.executable).with_name("allennlp")


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, flush=True)


def mean_std(values: List[float], scale: float = 100.0, digits: int = 2) -> str:
    """`mean ± std` of `values * scale` (the sample std), the value alone for one, `-` for none."""
    if not values:
        return "-"
    scaled = [scale * value for value in values]
    if len(scaled) == 1:
        return f"{scaled[0]:.{digits}f}"
    return f"{statistics.mean(scaled):.{digits}f} ± {statistics.stdev(scaled):.{digits}f}"


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as handle:
        handle.write(text)


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def seconds_of(duration: str) -> float:
    """Seconds of an allennlp duration `H:MM:SS[.ffffff]` (`training_duration` in metrics.json)."""
    hours, minutes, seconds = duration.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def count_tokens(path: Optional[str]) -> Optional[int]:
    """Whitespace tokens in a text file; None for no file."""
    if path is None:
        return None
    with open(path, encoding="utf-8") as text:
        return sum(len(line.split()) for line in text)


def evaluate_bilm(archive: str, data: Path, environment: Dict[str, str]) -> Dict:
    """`allennlp evaluate` of a biLM archive on `data`, kept next to the archive (`.valid.json`)."""
    output = Path(archive).with_suffix(".valid.json")
    if not output.exists():
        command = [
            str(ALLENNLP),
            "evaluate",
            archive,
            str(data),
            "--output-file",
            str(output),
            "--include-package",
            "elmoc_allennlp",
        ]
        run_logged(command, output.with_suffix(".log"), environment)
    return json.loads(output.read_text())


# ---------------------------------------------------------------------- the downstream grid

# task -> (config, environment variable prefix, data folder, split files, metric, metric name)
TASKS = {
    "ner": (
        "ner_crf_tagger.jsonnet",
        "NER",
        "conll2003",
        ("eng.train", "eng.testa", "eng.testb"),
        "f1-measure-overall",
        "NER F1",
    ),
    "sst5": (
        "sst5_bcn.jsonnet",
        "SST",
        "sst5",
        ("train.txt", "dev.txt", "test.txt"),
        "accuracy",
        "SST-5 acc",
    ),
    "pos": (
        str(REPO_ROOT / "examples" / "equal_compute_study" / "ud_pos_tagger.jsonnet"),
        "POS",
        "ud_ewt",
        ("en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu", "en_ewt-ud-test.conllu"),
        "accuracy",
        "POS acc",
    ),
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
            size = {"TRAIN": args.train_size, "VALIDATION": args.dev_size or args.eval_size}.get(
                split, args.eval_size
            )
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


def run_one(
    task: str,
    model: str,
    archive: Optional[str],
    seed: int,
    args,
    data,
    extra_overrides: Optional[Dict] = None,
) -> Dict:
    """One `allennlp train` of `task` with `model`'s biLM `archive` (None: fastText only) and
    `seed` (kept once finished); `extra_overrides` on top of the grid's."""
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
        environment.update(
            {
                "ELMOC_ARCHIVE": archive or "",
                "ELMOC_DIM": str(args.bilm_dims.get(model, 0)),
                "ELMOC_FASTTEXT": str(args.fasttext),
                "ELMOC_FASTTEXT_DIM": str(args.fasttext_dim),
                "OMP_NUM_THREADS": environment.get("OMP_NUM_THREADS", "1"),
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")])
                ),
            }
        )
        for split in SPLITS:
            environment[f"{prefix}_{split}_DATA_PATH"] = str(data[task][split])
        command = [
            str(ALLENNLP),
            "train",
            str(CONFIGS / config),
            "-s",
            str(run_dir),
            "--include-package",
            "elmoc_allennlp",
            "--include-package",
            "examples.equal_compute_study",
            "-o",
            json.dumps(
                {**overrides(task, seed, args, archive is not None), **(extra_overrides or {})}
            ),
        ]
        log(f"start {task} {model} seed {seed}")
        started = time.time()
        run_dir.parent.joinpath(f"seed{seed}.log").parent.mkdir(parents=True, exist_ok=True)
        with open(run_dir.parent / f"seed{seed}.log", "w") as output:
            completed = subprocess.run(
                command, env=environment, stdout=output, stderr=subprocess.STDOUT
            )
        if completed.returncode != 0 or not metrics_path.exists():
            lock.unlink()
            raise RuntimeError(
                f"{task} {model} seed {seed} failed; see {run_dir.parent / f'seed{seed}.log'}"
            )
        log(f"done  {task} {model} seed {seed} in {time.time() - started:.0f} s")
        lock.unlink()
    metrics = json.loads(metrics_path.read_text())
    return {
        "task": task,
        "model": model,
        "seed": seed,
        "dev": metrics[f"best_validation_{metric}"],
        "test": metrics[f"test_{metric}"],
        "best_epoch": metrics.get("best_epoch"),
        "training_duration": metrics.get("training_duration"),
    }
