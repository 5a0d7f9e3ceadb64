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

    OMP_NUM_THREADS=1 python -m examples.equal_compute_study.run_study --fasttext ptb.bin --lowercase \\
        --bilm ELMo=runs/elmo/model.tar.gz --bilm ELMo-C=runs/elmoc/model.tar.gz \\
        --pretrain ELMo=runs/elmo --pretrain ELMo-C=runs/elmoc --pretrain-tokens ptb.train.txt \\
        --data-dir ../shared/data --train-size 500 --eval-size 300 --epochs 4 --seeds 3 --jobs 2
"""

import argparse
import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from examples.common import (
    DEFAULT_DATA,
    FASTTEXT_ONLY,
    TASKS,
    RunElsewhere,
    count_tokens,
    log,
    mean_std,
    prepare_data,
    run_one,
    seconds_of,
    write_text,
)

# ---------------------------------------------------------------------- pretraining rows


def pretraining_row(name: str, serialization_dir: Path, num_tokens: Optional[int]) -> Dict:
    import elmoc_allennlp  # noqa: F401
    from allennlp.models.archival import load_archive

    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    model = load_archive(str(serialization_dir / "model.tar.gz")).model
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    seconds = seconds_of(metrics["training_duration"])
    row = {
        "model": name,
        "trainable_parameters": parameters,
        "epochs": metrics.get("epoch", 0) + 1,
        "pretraining_minutes": round(seconds / 60, 1),
        "tokens_per_second": (
            round(num_tokens * (metrics.get("epoch", 0) + 1) / seconds) if num_tokens else None
        ),
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
            cells += [
                mean_std([r["dev"] for r in runs], digits=1),
                mean_std([r["test"] for r in runs], digits=1),
            ]
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
    parser.add_argument(
        "--fasttext", type=Path, required=True, help="frozen fastText .bin for every model"
    )
    parser.add_argument("--bilm", action="append", default=[], help="NAME=model.tar.gz of a biLM")
    parser.add_argument("--pretrain", action="append", default=[], help="NAME=serialization dir")
    parser.add_argument(
        "--pretrain-tokens",
        action="append",
        default=[],
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
    parser.add_argument(
        "--lowercase",
        action="store_true",
        help="lowercase task text (fastText/biLM trained lowercased)",
    )
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    args.task_epochs = {
        task: int(epochs) for task, epochs in _pairs(args.task_epochs, "--task-epochs").items()
    }

    from elmoc_allennlp.downstream.archive import BilmArchive
    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    args.fasttext_dim = FastTextVectors.from_path(args.fasttext).dim
    bilms = _pairs(args.bilm, "--bilm")
    args.bilm_dims = {name: BilmArchive.open(path).output_dim for name, path in bilms.items()}
    models: List[Tuple[str, Optional[str]]] = [(FASTTEXT_ONLY, None)] + list(bilms.items())
    data = prepare_data(args)

    pretrain_dirs = _pairs(args.pretrain, "--pretrain")
    token_files = pretraining_token_files(list(pretrain_dirs), args.pretrain_tokens)
    pretraining = [
        pretraining_row(name, Path(path), count_tokens(token_files[name]))
        for name, path in pretrain_dirs.items()
    ]

    grid = [
        (task, model, archive, seed)
        for task in args.tasks
        for seed in args.seeds
        for model, archive in models
    ]
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
                "tasks": args.tasks,
                "models": [name for name, _ in models],
                "seeds": args.seeds,
                "train_size": args.train_size,
                "eval_size": args.eval_size,
                "dev_size": args.dev_size,
                "epochs": args.epochs,
                "task_epochs": args.task_epochs,
                "batch_size": args.batch_size,
                "fasttext": str(args.fasttext),
                "bilms": bilms,
                "lowercase": args.lowercase,
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
