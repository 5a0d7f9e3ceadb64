#!/usr/bin/env python
"""
Does fine-tuning a general biLM on a task's unlabelled text help that task? Measures, with the
project's own configs and commands:

1. the task's text: the sentences of SST-5 train / dev / test (from `--data-dir`), lowercased as
   the quickstart biLM was pretrained, one per line; how many of their words the biLM's fastText
   dictionary lacks;
2. intrinsic figures of the general biLM (`--archive`) on that text and on its own pretraining
   validation text (`allennlp evaluate`: loss = 1 - cosine, mean cosine, retrieval accuracy);
3. fine-tuning on the train sentences only (no labels) with
   `training_configs/pretrain/finetune_domain.jsonnet` (`allennlp train`), validated on the dev
   sentences, and its cost against the cost of pretraining;
4. the same intrinsic figures for the fine-tuned biLM;
5. downstream: `training_configs/downstream/sst5_bcn.jsonnet` (`allennlp train`, test accuracy
   of the best dev epoch) with the general biLM, the fine-tuned biLM, and fastText only (the same
   config without the ELMo-C embedder), over `--seeds` seeds, on `--max-train` labelled
   training sentences for `--epochs` epochs.

Every step writes its output atomically and is skipped when the output exists, so an interrupted
run resumes where it stopped (a half-finished training run is started again). The tables go to
`OUTPUT_DIR/results.md`, every figure to `OUTPUT_DIR/results.json`.

    python -m examples.finetune_evidence.run_evidence [--archive quickstart_output/elmoc_small/model.tar.gz]
        [--data-dir ../shared/data] [--seeds 3] [--epochs 10] [--max-train 2000]
        [--output-dir runs/finetune_evidence]
"""

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional

from benchmarks.common import run_logged
from elmoc_allennlp.common.atomic_files import atomic_write
from examples.common import log, mean_std, seconds_of, write_json

REPO_ROOT = Path(__file__).resolve().parents[2]

DEFAULT_ARCHIVE = REPO_ROOT / "quickstart_output" / "elmoc_small" / "model.tar.gz"
# The shared data next to the checkout (or next to one of its parent folders, for a worktree).
DEFAULT_DATA = next(
    (
        folder / "shared" / "data"
        for folder in REPO_ROOT.parents
        if (folder / "shared" / "data" / "sst5").is_dir()
    ),
    REPO_ROOT.parent / "shared" / "data",
)
FINETUNE_CONFIG = REPO_ROOT / "training_configs" / "pretrain" / "finetune_domain.jsonnet"
BCN_CONFIG = REPO_ROOT / "training_configs" / "downstream" / "sst5_bcn.jsonnet"
SPLITS = ("train", "dev", "test")
CONDITIONS = ("fasttext", "general", "finetuned")
CONDITION_NAMES = {
    "fasttext": "fastText only",
    "general": "fastText + general ELMo-C",
    "finetuned": "fastText + domain-fine-tuned ELMo-C",
}


def run(command: List[str], log_path: Path, environment: Dict[str, str]) -> float:
    """Runs a command with `environment` added and this checkout importable; its wall-clock seconds."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return run_logged(command, log_path, dict(os.environ, **environment, PYTHONPATH=path))


def allennlp(*arguments: str) -> List[str]:
    return [sys.executable, "-m", "allennlp", *arguments, "--include-package", "elmoc_allennlp"]


# ---------------------------------------------------------------------------------- text


def read_sst_sentences(data_dir: Path) -> Dict[str, List[List[str]]]:
    from allennlp_models.classification.dataset_readers.stanford_sentiment_tree_bank import (
        StanfordSentimentTreeBankDatasetReader,
    )

    reader = StanfordSentimentTreeBankDatasetReader(granularity="5-class", use_subtrees=False)
    return {
        split: [
            [token.text for token in instance["tokens"].tokens]
            for instance in reader.read(str(data_dir / "sst5" / f"{split}.txt"))
        ]
        for split in SPLITS
    }


def unlabelled_file(text_dir: Path, size: int) -> Path:
    return text_dir / ("sst_train.txt" if size <= 0 else f"sst_train_unlabelled_{size}.txt")


def unlabelled_subset(text_dir: Path, size: int) -> int:
    """The fine-tuning text: all train sentences (`size` <= 0) or a seeded random `size` of them."""
    lines = (text_dir / "sst_train.txt").read_text(encoding="utf-8").splitlines()
    if size <= 0 or size >= len(lines):
        return len(lines)
    chosen = sorted(random.Random(17).sample(range(len(lines)), size))
    with atomic_write(unlabelled_file(text_dir, size), "w") as handle:
        handle.writelines(lines[index] + "\n" for index in chosen)
    return size


def trees_file(text_dir: Path, split: str, size: int) -> Path:
    return text_dir / f"sst_{split}_trees_{size}.txt"


def sample_trees(args, split: str, size: int, seed: int, text_dir: Path) -> int:
    """A seeded random `size` of the split's labelled trees (`size` <= 0: all of them)."""
    trees = (args.data_dir / "sst5" / f"{split}.txt").read_text(encoding="utf-8").splitlines()
    trees = [tree for tree in trees if tree.strip()]
    if 0 < size < len(trees):
        trees = [trees[i] for i in sorted(random.Random(seed).sample(range(len(trees)), size))]
    with atomic_write(trees_file(text_dir, split, size), "w") as handle:
        handle.writelines(tree + "\n" for tree in trees)
    return len(trees)


def prepare_text(args, text_dir: Path, vectors_path: str) -> Dict[str, Any]:
    """Lowercased sentence files, the subsampled labelled train trees, and OOV statistics."""
    stats_path = text_dir / (
        f"text_statistics_{args.max_train}_{args.max_dev}_{args.max_test}_"
        f"{args.finetune_sentences}.json"
    )
    if stats_path.exists():
        return json.loads(stats_path.read_text())
    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    vectors = FastTextVectors.from_path(vectors_path)
    sentences = read_sst_sentences(args.data_dir)
    text_dir.mkdir(parents=True, exist_ok=True)
    statistics_: Dict[str, Any] = {}
    for split, split_sentences in sentences.items():
        lowered = [[token.lower() for token in sentence] for sentence in split_sentences]
        with atomic_write(text_dir / f"sst_{split}.txt", "w") as handle:
            handle.writelines(" ".join(sentence) + "\n" for sentence in lowered)
        tokens = [token for sentence in lowered for token in sentence]
        types = set(tokens)
        statistics_[split] = {
            "sentences": len(lowered),
            "tokens": len(tokens),
            "oov_token_rate": sum(vectors.word_id(t) < 0 for t in tokens) / len(tokens),
            "oov_type_rate": sum(vectors.word_id(t) < 0 for t in types) / len(types),
        }
    for split, size, seed in (
        ("train", args.max_train, 13),
        ("dev", args.max_dev, 14),
        ("test", args.max_test, 15),
    ):
        statistics_[f"labelled_{split}_sentences"] = sample_trees(args, split, size, seed, text_dir)
    statistics_["unlabelled_train_sentences"] = unlabelled_subset(text_dir, args.finetune_sentences)
    write_json(stats_path, statistics_)
    return statistics_


# ---------------------------------------------------------------------------------- biLM


# The same batches for every biLM (retrieval accuracy ranks the gold word among the batch's).
EVALUATION_LOADER = {
    "data_loader": {
        "batch_sampler": {
            "type": "bucket",
            "batch_size": 64,
            "sorting_keys": ["tokens"],
            "padding_noise": 0.0,
        }
    }
}


def intrinsic(archive: Path, name: str, files: Dict[str, Path], out_dir: Path) -> Dict[str, Any]:
    results = {}
    for text_name, path in files.items():
        # allennlp evaluate splits --output-file at commas: a plain file name.
        slug = re.sub(r"[^A-Za-z0-9-]+", "_", text_name).strip("_")
        output = out_dir / f"{name}_{slug}.json"
        if not output.exists():
            log(f"allennlp evaluate {name} biLM on {text_name}")
            run(
                allennlp(
                    "evaluate",
                    str(archive),
                    str(path),
                    "--output-file",
                    str(output),
                    "-o",
                    json.dumps(EVALUATION_LOADER),
                ),
                out_dir / "logs" / f"{name}_{slug}.log",
                {},
            )
        results[text_name] = json.loads(output.read_text())
    return results


def finetune(args, text_dir: Path, out_dir: Path) -> Dict[str, Any]:
    serialization_dir = out_dir / "finetuned_bilm"
    archive = serialization_dir / "model.tar.gz"
    timing_path = out_dir / "finetune_timing.json"
    if not (archive.exists() and timing_path.exists()):
        if serialization_dir.exists():
            shutil.rmtree(serialization_dir)
        log("fine-tuning the biLM on the SST-5 train sentences (finetune_domain.jsonnet)")
        command = allennlp("train", str(FINETUNE_CONFIG), "-s", str(serialization_dir))
        if args.finetune_overrides:
            command += ["-o", args.finetune_overrides]
        seconds = run(
            command,
            out_dir / "logs" / "finetune.log",
            {
                "ELMOC_ARCHIVE": str(args.archive),
                "ELMOC_TRAIN_DATA": str(unlabelled_file(text_dir, args.finetune_sentences)),
                "ELMOC_VALIDATION_DATA": str(text_dir / "sst_dev.txt"),
            },
        )
        write_json(timing_path, {"wall_seconds": seconds})
    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    timing = json.loads(timing_path.read_text())
    return {"archive": archive, "metrics": metrics, "wall_seconds": timing["wall_seconds"]}


# ---------------------------------------------------------------------------------- downstream


def bilm_settings(archive: Path) -> Dict[str, str]:
    from elmoc_allennlp.downstream.archive import BilmArchive

    description = BilmArchive.open(str(archive))
    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    return {
        "ELMOC_ARCHIVE": str(archive),
        "ELMOC_DIM": str(description.output_dim),
        "ELMOC_FASTTEXT": description.input_vectors_path,
        "ELMOC_FASTTEXT_DIM": str(FastTextVectors.from_path(description.input_vectors_path).dim),
    }


def fasttext_only_config(settings: Dict[str, str], path: Path) -> Path:
    """sst5_bcn.jsonnet without the ELMo-C indexer and embedder (everything else unchanged)."""
    if path.exists():
        return path
    from allennlp.common.params import Params

    config = Params.from_file(str(BCN_CONFIG), ext_vars=settings).as_dict(quiet=True)
    for reader in ("dataset_reader", "validation_dataset_reader"):
        del config[reader]["token_indexers"]["elmoc"]
    del config["model"]["text_field_embedder"]["token_embedders"]["elmoc"]
    config["model"]["pre_encode_feedforward"]["input_dim"] = int(settings["ELMOC_FASTTEXT_DIM"])
    write_json(path, config)
    return path


def downstream_run(
    condition: str,
    seed: int,
    archive: Optional[Path],
    args,
    text_dir: Path,
    out_dir: Path,
    general_settings: Dict[str, str],
) -> Dict[str, Any]:
    run_dir = out_dir / "downstream" / condition / f"seed{seed}"
    result_path = run_dir / "result.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    if run_dir.exists():
        shutil.rmtree(run_dir)
    settings = bilm_settings(archive) if archive is not None else dict(general_settings)
    train_path = str(trees_file(text_dir, "train", args.max_train))
    settings.update(
        {
            "SST_TRAIN_DATA_PATH": train_path,
            "SST_VALIDATION_DATA_PATH": str(trees_file(text_dir, "dev", args.max_dev)),
            "SST_TEST_DATA_PATH": str(trees_file(text_dir, "test", args.max_test)),
        }
    )
    if condition == "fasttext":
        config = fasttext_only_config(
            settings, out_dir / "downstream" / "sst5_bcn_fasttext_only.json"
        )
    else:
        config = BCN_CONFIG
    overrides = {
        "train_data_path": train_path,
        "trainer.num_epochs": args.epochs,
        "random_seed": 13370 + seed,
        "numpy_seed": 1337 + seed,
        "pytorch_seed": 133 + seed,
        # The labelled budget: whole sentences only (no phrase-level subtrees).
        "dataset_reader.use_subtrees": False,
        # The quickstart's fastText model is lowercase (training_configs/downstream/README.md).
        "dataset_reader.token_indexers.tokens.lowercase_tokens": True,
        "validation_dataset_reader.token_indexers.tokens.lowercase_tokens": True,
    }
    log(f"downstream: {condition}, seed {seed}")
    seconds = run(
        allennlp("train", str(config), "-s", str(run_dir / "run"), "-o", json.dumps(overrides)),
        run_dir / "train.log",
        settings,
    )
    metrics = json.loads((run_dir / "run" / "metrics.json").read_text())
    result = {
        "condition": condition,
        "seed": seed,
        "dev_accuracy": metrics["best_validation_accuracy"],
        "test_accuracy": metrics["test_accuracy"],
        "best_epoch": metrics["best_epoch"],
        "wall_seconds": seconds,
    }
    write_json(result_path, result)
    # Keep the metrics and logs, not the weights.
    for heavy in list((run_dir / "run").glob("*.th")) + [run_dir / "run" / "model.tar.gz"]:
        if heavy.exists():
            heavy.unlink()
    return result


# ---------------------------------------------------------------------------------- report


def report(summary: Dict[str, Any]) -> str:
    lines = ["## Downstream: SST-5 with sst5_bcn.jsonnet", ""]
    setup = summary["setup"]
    lines.append(
        f"{setup['labelled_train_sentences']} labelled training sentences (no subtrees), "
        f"{setup['labelled_dev_sentences']} dev and {setup['labelled_test_sentences']} test "
        "sentences (seeded random samples), "
        f"{setup['epochs']} epochs, accuracy (%) mean ± std over {setup['seeds']} seeds; test at "
        "the best dev epoch."
    )
    lines += ["", "| input | dev | test | minutes per run |", "|---|---|---|---|"]
    for condition in CONDITIONS:
        runs = summary["downstream"].get(condition, [])
        if not runs:
            continue
        lines.append(
            f"| {CONDITION_NAMES[condition]} | {mean_std([r['dev_accuracy'] for r in runs])} | "
            f"{mean_std([r['test_accuracy'] for r in runs])} | "
            f"{statistics.mean(r['wall_seconds'] for r in runs) / 60:.1f} |"
        )
    lines += ["", "## Intrinsic: the biLM before and after fine-tuning", ""]
    lines += [
        "| text | biLM | loss (1 − cos) | forward / backward | mean cosine | retrieval accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for text_name in summary["intrinsic"]["general"]:
        for name in ("general", "finetuned"):
            m = summary["intrinsic"][name][text_name]
            mean_loss = (m["forward_loss"] + m["backward_loss"]) / 2  # "loss", the directions' mean
            lines.append(
                f"| {text_name} | {name} | {mean_loss:.4f} | {m['forward_loss']:.4f} / "
                f"{m['backward_loss']:.4f} | {m['cosine_similarity']:.4f} | "
                f"{m['retrieval_accuracy']:.3f} |"
            )
    cost = summary["cost"]
    lines += ["", "## Cost", ""]
    lines.append(
        f"Pretraining (quickstart): {cost['pretraining_minutes']:.1f} min; fine-tuning: "
        f"{cost['finetuning_minutes']:.1f} min training ({cost['finetuning_wall_minutes']:.1f} min "
        f"wall clock with loading), best epoch {cost['finetuning_best_epoch'] + 1} of "
        f"{cost['finetuning_epochs']}, on {setup['unlabelled_train_sentences']} unlabelled SST-5 "
        f"train sentences (overrides: {setup['finetune_overrides'] or 'none'})."
    )
    text = summary["text"]
    lines += ["", "## Text", ""]
    for split in SPLITS:
        s = text[split]
        lines.append(
            f"- SST-5 {split}: {s['sentences']} sentences, {s['tokens']} tokens; not in the "
            f"fastText dictionary: {100 * s['oov_token_rate']:.1f}% of tokens, "
            f"{100 * s['oov_type_rate']:.1f}% of word types"
        )
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="with sst5/")
    parser.add_argument(
        "--pretraining-valid",
        type=Path,
        default=None,
        help="the biLM's pretraining validation text (default: the quickstart's "
        "PTB valid, next to the archive's folder)",
    )
    parser.add_argument(
        "--pretraining-valid-sentences",
        type=int,
        default=-1,
        help="evaluate on the first N of them (-1: all, 0: skip)",
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10, help="downstream epochs")
    parser.add_argument("--max-train", type=int, default=2000, help="labelled train sentences")
    parser.add_argument("--max-dev", type=int, default=0, help="dev sentences (0: all 1,101)")
    parser.add_argument("--max-test", type=int, default=0, help="test sentences (0: all 2,210)")
    parser.add_argument("--jobs", type=int, default=1, help="downstream runs in parallel")
    parser.add_argument(
        "--finetune-sentences",
        type=int,
        default=0,
        help="unlabelled train sentences to fine-tune on (0: all 8,544)",
    )
    parser.add_argument("--finetune-overrides", default="", help="-o for the fine-tuning run")
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS)
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "runs" / "finetune_evidence")
    args = parser.parse_args(argv)
    args.archive = args.archive.resolve()
    args.data_dir = args.data_dir.resolve()
    out_dir = args.output_dir.resolve()
    text_dir = out_dir / "text"
    if not args.archive.exists():
        parser.error(f"--archive {args.archive} does not exist (run scripts/quickstart.py)")
    if not (args.data_dir / "sst5" / "train.txt").exists():
        parser.error(f"--data-dir {args.data_dir} has no sst5/train.txt")

    general_settings = bilm_settings(args.archive)
    text = prepare_text(args, text_dir, general_settings["ELMOC_FASTTEXT"])
    if args.conditions == ["fasttext"]:
        # No biLM involved: these runs can go first (e.g. while the biLM is still pretraining).
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(
                pool.map(
                    lambda seed: downstream_run(
                        "fasttext", seed, None, args, text_dir, out_dir, general_settings
                    ),
                    range(args.seeds),
                )
            )
        log("fastText-only runs done; run again with all --conditions for the tables")
        return 0
    intrinsic_files = {"SST-5 dev": text_dir / "sst_dev.txt"}
    pretraining_valid = args.pretraining_valid or (
        args.archive.parent.parent / "data" / "ptb.valid.txt"
    )
    if pretraining_valid.exists() and args.pretraining_valid_sentences != 0:
        lines = pretraining_valid.read_text(encoding="utf-8").splitlines(keepends=True)
        if args.pretraining_valid_sentences > 0:
            lines = lines[: args.pretraining_valid_sentences]
        first = text_dir / f"pretraining_valid_{len(lines)}.txt"
        if not first.exists():
            with atomic_write(first, "w") as handle:
                handle.writelines(lines)
        intrinsic_files[f"pretraining valid (PTB, first {len(lines)} sentences)"] = first
    general = intrinsic(args.archive, "general", intrinsic_files, out_dir / "intrinsic")
    tuned = finetune(args, text_dir, out_dir)
    finetuned = intrinsic(tuned["archive"], "finetuned", intrinsic_files, out_dir / "intrinsic")

    downstream: Dict[str, List[Dict[str, Any]]] = {}
    archives = {"fasttext": None, "general": args.archive, "finetuned": tuned["archive"]}
    runs = [(condition, seed) for seed in range(args.seeds) for condition in args.conditions]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = pool.map(
            lambda run_: downstream_run(
                run_[0], run_[1], archives[run_[0]], args, text_dir, out_dir, general_settings
            ),
            runs,
        )
        for (condition, _), result in zip(runs, results):
            downstream.setdefault(condition, []).append(result)

    pretraining_metrics = json.loads((args.archive.parent / "metrics.json").read_text())
    summary = {
        "setup": {
            "archive": str(args.archive),
            "seeds": args.seeds,
            "epochs": args.epochs,
            "labelled_train_sentences": text["labelled_train_sentences"],
            "labelled_dev_sentences": text["labelled_dev_sentences"],
            "labelled_test_sentences": text["labelled_test_sentences"],
            "unlabelled_train_sentences": text["unlabelled_train_sentences"],
            "finetune_overrides": args.finetune_overrides,
        },
        "text": text,
        "intrinsic": {"general": general, "finetuned": finetuned},
        "cost": {
            "pretraining_minutes": seconds_of(pretraining_metrics["training_duration"]) / 60,
            "pretraining_epochs": pretraining_metrics["epoch"] + 1,
            "finetuning_minutes": seconds_of(tuned["metrics"]["training_duration"]) / 60,
            "finetuning_wall_minutes": tuned["wall_seconds"] / 60,
            "finetuning_best_epoch": tuned["metrics"]["best_epoch"],
            "finetuning_epochs": tuned["metrics"]["epoch"] + 1,
            "finetuning_best_validation_loss": tuned["metrics"].get("best_validation_loss"),
        },
        "downstream": downstream,
    }
    write_json(out_dir / "results.json", summary)
    table = report(summary)
    with atomic_write(out_dir / "results.md", "w") as handle:
        handle.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
