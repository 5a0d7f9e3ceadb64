#!/usr/bin/env python
"""
Quality against pretraining time: ELMo, ELMo-C (and optionally ELMo-A) pretrained on the PTB text of
`make demo` for the same wall clock, one after the other, each keeping a model archive at every
mark (`elmoc_archive_at_marks`); then, at every mark, frozen features downstream (UD POS and
CoNLL-2003 NER through the equal-compute study's configs and `allennlp train`), the intrinsic figure
(`allennlp evaluate` on PTB valid), and the embedding cost of the last marks (`allennlp elmoc-embed`,
sentences/s, side by side). Writes `results.json`, `results.md` and `quality_vs_time.png` to
`--output-dir`. Resumable: finished pretraining runs, evaluations and downstream runs are kept.

    OMP_NUM_THREADS=1 python -m examples.quality_vs_time.run_study --data-dir ../shared/data \\
        --marks 2.5 5 10 20 --models elmo elmoc --train-size 2000 --jobs 2
"""

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path
from typing import Dict, List

from benchmarks.common import run_logged
from examples import common
from examples.common import log, mean_std, write_json, write_text

REPO_ROOT = Path(__file__).resolve().parents[2]

PRETRAIN = REPO_ROOT / "training_configs" / "pretrain"
# name -> (label, config, ELMOC_BASELINE)
MODELS = {
    "elmoc": ("ELMo-C", PRETRAIN / "elmoc_small.jsonnet", None),
    "elmo": ("ELMo", PRETRAIN / "baselines_small.jsonnet", "elmo"),
    "elmo_a": ("ELMo-A", PRETRAIN / "baselines_small.jsonnet", "elmo_a"),
}
FIGURE = "quality_vs_time.png"


def pretrain(name: str, args, corpus: Dict[str, Path], environment: Dict[str, str]) -> List[Dict]:
    """Trains one model until its last mark is archived; returns its marks' records."""
    from elmoc_allennlp.training.archive_at_marks import read_marks

    label, config, baseline = MODELS[name]
    run_dir = args.output_dir / "pretrain" / name
    if len(read_marks(str(run_dir))) == len(args.marks):
        return read_marks(str(run_dir))
    if run_dir.exists():
        # An interrupted run: its clock would not match a fresh one's, so start it again.
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    environment = dict(environment, ELMOC_BASELINE=baseline or "", ELMOC_ELMO_ARCHIVE="")
    overrides = {
        "trainer.num_epochs": args.max_epochs,
        # The recipe these results were measured with: the rate halves over the second half of
        # the FIRST epoch (elmoc_small's run fractions 0.5 and 1.0 are of the whole run, which
        # here is --max-epochs epochs cut at the last mark).
        "trainer.learning_rate_scheduler.decay_start_fraction": 0.5 / args.max_epochs,
        "trainer.learning_rate_scheduler.decay_end_fraction": 1.0 / args.max_epochs,
        "trainer.callbacks": [{"type": "elmoc_archive_at_marks", "minutes": args.marks}],
    }
    command = [
        str(common.ALLENNLP),
        "train",
        str(config),
        "-s",
        str(run_dir),
        "--include-package",
        "elmoc_allennlp",
        "-o",
        json.dumps(overrides),
    ]
    log(f"pretraining {label} to {args.marks[-1]:g} min ({config.name})")
    with open(run_dir.parent / f"{name}.log", "w") as output:
        process = subprocess.Popen(
            command, env=environment, stdout=output, stderr=subprocess.STDOUT
        )
        done = 0
        while process.poll() is None:
            time.sleep(5)
            records = read_marks(str(run_dir))
            if len(records) > done:
                done = len(records)
                log(
                    f"  {label}: {done}/{len(args.marks)} marks archived "
                    f"(epoch {records[-1]['epoch'] + 1}, {records[-1]['minutes']:g} min)"
                )
            if done == len(args.marks):
                process.send_signal(signal.SIGTERM)
                process.wait()
    records = read_marks(str(run_dir))
    if len(records) < len(args.marks):
        raise SystemExit(
            f"{label} stopped before its last mark; see {run_dir.parent / f'{name}.log'}"
            f" (raise --max-epochs if it ran out of epochs)"
        )
    return records


def embedding_speed(archives: Dict[str, str], corpus: Dict[str, Path], args, environment) -> Dict:
    """
    Sentences/s of `allennlp elmoc-embed --all` per archive (the whole command, model loading
    included), the models alternating, twice each (side by side); the median of the two.
    """
    sentences = [line for line in corpus["test"].read_text().splitlines() if line.strip()]
    text = args.output_dir / "embed" / "sentences.txt"
    text.parent.mkdir(parents=True, exist_ok=True)
    text.write_text("\n".join(sentences[: args.embed_sentences]) + "\n")
    seconds: Dict[str, List[float]] = {label: [] for label in archives}
    for round_number in range(2):
        for label, archive in archives.items():
            output = args.output_dir / "embed" / f"{label}.hdf5"
            command = [
                str(common.ALLENNLP),
                "elmoc-embed",
                archive,
                str(text),
                str(output),
                "--all",
                "--force",
                "--include-package",
                "elmoc_allennlp",
            ]
            started = time.perf_counter()
            run_logged(command, output.with_suffix(".log"), environment)
            seconds[label].append(time.perf_counter() - started)
    count = min(len(sentences), args.embed_sentences)
    return {label: round(count / statistics.median(times), 1) for label, times in seconds.items()}


def downstream(archives: Dict[str, str], args, environment) -> List[Dict]:
    """The downstream grid of the equal-compute study, one model per mark's archive."""
    from concurrent.futures import ThreadPoolExecutor

    from elmoc_allennlp.downstream.archive import BilmArchive
    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    settings = Namespace(
        output_dir=args.output_dir / "downstream",
        data_dir=args.data_dir,
        tasks=args.tasks,
        train_size=args.train_size,
        eval_size=args.eval_size,
        dev_size=args.dev_size,
        epochs=args.epochs,
        task_epochs={},
        batch_size=args.batch_size,
        lowercase=True,
        collect_only=False,
        fasttext=args.fasttext,
        fasttext_dim=FastTextVectors.from_path(args.fasttext).dim,
        bilm_dims={name: BilmArchive.open(path).output_dim for name, path in archives.items()},
    )
    settings.output_dir.mkdir(parents=True, exist_ok=True)
    data = common.prepare_data(settings)
    last = {name for name in archives if name.endswith(f"@{args.marks[-1]:g}min")}
    items = []
    for task in args.tasks:
        for model, archive in [(common.FASTTEXT_ONLY, None)] + list(archives.items()):
            seeds = args.seeds if model in last or archive is None else args.seeds[:1]
            items += [(task, model, archive, seed) for seed in seeds]

    def run_or_wait(item) -> Dict:
        while True:
            try:
                return common.run_one(*item, settings, data)
            except common.RunElsewhere:
                time.sleep(
                    30
                )  # another driver (e.g. --downstream-only) is running it: take its result

    os.environ.update(environment)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return list(pool.map(run_or_wait, items))


def table(results: Dict) -> str:
    tasks = results["settings"]["tasks"]
    header = ["biLM", "minutes", "epoch", "intrinsic (PTB valid)"] + [
        f"{common.TASKS[task][5]} test" for task in tasks
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for point in results["points"]:
        cells = [
            point["model"],
            f"{point['minutes']:g}",
            str(point["epoch"] + 1),
            point["intrinsic"],
        ]
        cells += [mean_std(point["test"][task], digits=1) for task in tasks]
        lines.append("| " + " | ".join(cells) + " |")
    for task in tasks:
        lines.append(
            f"\nfastText only, {common.TASKS[task][5]} test: "
            f"{mean_std(results['reference'][task], digits=1)}"
        )
    speed = results.get("embedding_sentences_per_second", {})
    if speed:
        lines.append(
            "\nallennlp elmoc-embed, sentences/s: "
            + ", ".join(f"{label} {value:,}" for label, value in speed.items())
        )
    return "\n".join(lines) + "\n"


def plot(results: Dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = results["settings"]["tasks"]
    labels = sorted({point["label"] for point in results["points"]})
    colors = {label: f"C{index}" for index, label in enumerate(labels)}
    figure, axes = plt.subplots(1, len(tasks) + 2, figsize=(5 * (len(tasks) + 2), 4))
    for axis, task in zip(axes, tasks):
        for label in labels:
            points = [p for p in results["points"] if p["label"] == label]
            means = [100 * statistics.mean(p["test"][task]) for p in points]
            errors = [
                100 * statistics.stdev(p["test"][task]) if len(p["test"][task]) > 1 else 0
                for p in points
            ]
            axis.errorbar(
                [p["minutes"] for p in points],
                means,
                yerr=errors,
                marker="o",
                label=label,
                capsize=3,
                color=colors[label],
            )
        axis.axhline(
            100 * statistics.mean(results["reference"][task]),
            color="grey",
            linestyle="--",
            label="fastText only",
        )
        axis.set(
            title=f"{common.TASKS[task][5]} (test)", xlabel="pretraining minutes", xscale="log"
        )
        axis.legend()
    axes[len(tasks)].set_yscale("log")
    for axis, (key, title) in zip(
        axes[len(tasks) :],
        [("perplexity", "ELMo / ELMo-A perplexity"), ("cosine_loss", "ELMo-C 1 - cosine")],
    ):
        for label in labels:
            points = [p for p in results["points"] if p["label"] == label and key in p]
            if points:
                axis.plot(
                    [p["minutes"] for p in points],
                    [p[key] for p in points],
                    marker="o",
                    label=label,
                    color=colors[label],
                )
        axis.set(title=f"{title} (PTB valid)", xlabel="pretraining minutes", xscale="log")
        axis.legend()
    marks = results["settings"]["marks"]
    for axis in axes:
        axis.set_xticks(marks, [f"{m:g}" for m in marks])
        axis.minorticks_off()
    # Perplexities here span less than a decade, where a log axis has no labelled major tick:
    # label round values (1-9 x 10^k; 1, 2, 5 x 10^k where those are too many) in the plotted range.
    low, high = axes[len(tasks)].get_ylim()
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for steps in ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 5), (1,)):
        ticks = [
            step * 10.0**decade
            for decade in decades
            for step in steps
            if low <= step * 10.0**decade <= high
        ]
        if len(ticks) <= 6:
            break
    axes[len(tasks)].set_yticks(ticks, [f"{tick:g}" for tick in ticks])
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "runs" / "quality_vs_time")
    parser.add_argument("--data-dir", type=Path, default=common.DEFAULT_DATA)
    parser.add_argument("--models", nargs="+", default=["elmo", "elmoc"], choices=list(MODELS))
    parser.add_argument(
        "--marks",
        type=float,
        nargs="+",
        default=[2.5, 5, 10, 20],
        help="minutes of pretraining at which an archive is kept",
    )
    parser.add_argument(
        "--max-epochs", type=int, default=100, help="an upper bound; runs stop at the last mark"
    )
    parser.add_argument("--tasks", nargs="+", default=["pos", "ner"], choices=list(common.TASKS))
    parser.add_argument("--train-size", type=int, default=2000, help="training sentences per task")
    parser.add_argument("--eval-size", type=int, help="dev/test sentences per task (default: all)")
    parser.add_argument(
        "--dev-size", type=int, help="dev sentences per task (default: --eval-size)"
    )
    parser.add_argument("--epochs", type=int, default=5, help="downstream epochs")
    parser.add_argument(
        "--batch-size", type=int, help="downstream batch size (default: the configs')"
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[1, 2, 3],
        help="seeds at the last mark and for fastText only; the first elsewhere",
    )
    parser.add_argument(
        "--embed-sentences", type=int, default=3000, help="PTB test sentences to embed"
    )
    parser.add_argument("--jobs", type=int, default=2, help="downstream runs at a time")
    parser.add_argument(
        "--downstream-only",
        action="store_true",
        help="stop after the downstream grid of the given --models (e.g. on a spare core"
        " while the next model pretrains); a full invocation then adds the rest",
    )
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="redraw the figure from --output-dir's results.json (no training)",
    )
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads((args.output_dir / "results.json").read_text()), args.output_dir / FIGURE)
        log(f"wrote {args.output_dir / FIGURE}")
        return
    started = time.time()
    args.output_dir = args.output_dir.resolve()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    from scripts import quickstart  # the PTB text and fastText of `make demo`

    corpus = quickstart.prepare_corpus(args.output_dir / "data")
    args.fasttext = args.output_dir / "fasttext" / "ptb.bin"
    if not args.fasttext.exists():
        log("fastText on PTB train")
        quickstart.train_vectors(corpus["train"], args.fasttext, threads=os.cpu_count() or 1)
    environment = dict(
        os.environ,
        ELMOC_FASTTEXT=str(args.fasttext),
        ELMOC_TRAIN_DATA=str(corpus["train"]),
        ELMOC_VALIDATION_DATA=str(corpus["valid"]),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    marks = {name: pretrain(name, args, corpus, environment) for name in args.models}

    archives, points = {}, []
    for name, records in marks.items():
        label = MODELS[name][0]
        for record in records:
            metrics = common.evaluate_bilm(record["archive"], corpus["valid"], environment)
            point = {"model": f"{label}@{record['minutes']:g}min", "label": label, **record}
            # The biLM's `loss` is the sum of its two directions: report their mean per token.
            per_direction = (metrics["forward_loss"] + metrics["backward_loss"]) / 2
            if "cosine_similarity" in metrics:
                point["cosine_loss"] = round(per_direction, 4)
                point["intrinsic"] = (
                    f"1-cos {per_direction:.4f}, " f"retrieval {metrics['retrieval_accuracy']:.3f}"
                )
            else:
                point["perplexity"] = round(math.exp(per_direction), 1)
                point["intrinsic"] = f"perplexity {point['perplexity']}"
            archives[point["model"]] = record["archive"]
            points.append(point)
    runs = downstream(archives, args, environment)
    if args.downstream_only:
        log(f"downstream of {', '.join(archives)} done in {(time.time() - started) / 60:.1f} min")
        return
    for point in points:
        point["test"] = {
            task: [r["test"] for r in runs if r["model"] == point["model"] and r["task"] == task]
            for task in args.tasks
        }
    last = {MODELS[name][0]: records[-1]["archive"] for name, records in marks.items()}
    results = {
        "settings": {
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in vars(args).items()
        },
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "points": points,
        "reference": {
            task: [
                r["test"] for r in runs if r["model"] == common.FASTTEXT_ONLY and r["task"] == task
            ]
            for task in args.tasks
        },
        "embedding_sentences_per_second": embedding_speed(last, corpus, args, environment),
        "runs": runs,
    }
    results["total_minutes_this_invocation"] = round((time.time() - started) / 60, 1)
    write_json(args.output_dir / "results.json", results)
    write_text(args.output_dir / "results.md", table(results))
    plot(results, args.output_dir / FIGURE)
    print(table(results))
    log(
        f"done in {results['total_minutes_this_invocation']} min; figure: {args.output_dir / FIGURE}"
    )


if __name__ == "__main__":
    main()
