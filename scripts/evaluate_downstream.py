#!/usr/bin/env python
"""
Does ELMo-C help downstream? Trains the same small models twice with the same budget - on the
frozen fastText vectors alone, and on fastText + ELMo-C (a learned scalar mix of the biLM's
layers, Peters et al. 2018 eq. 1) - for

* SST-5 sentence classification (accuracy; BiLSTM + max pooling),
* CoNLL-2003 NER (span F1, BIOUL; BiLSTM tagger),
* UD English-EWT POS tagging (UPOS accuracy; BiLSTM tagger),

over a few seeds, and prints a table of mean +- standard deviation (over seeds) on the dev and
test sets (the test score is the one of the epoch with the best dev score).

The fastText vectors are the biLM's own input vectors (found from the archive), so the only
difference between the two settings is ELMo-C. The biLM is frozen, so its layers are computed
once per sentence and cached in memory (float16); training sets are subsampled (`--max-train`,
the same sentences for every run) so that the whole run takes ~22 minutes on 2 CPU cores.

    python scripts/evaluate_downstream.py [--archive quickstart_output/elmoc_small/model.tar.gz]
        [--data-dir ../shared/data] [--seeds 3] [--epochs 15] [--max-train 2000]
        [--output-dir runs/downstream_evidence]
"""
import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

DEFAULT_ARCHIVE = REPO_ROOT / "quickstart_output" / "elmoc_small" / "model.tar.gz"
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
TASKS = ("sst5", "ner", "pos")
TASK_NAMES = {
    "sst5": "SST-5 (accuracy)",
    "ner": "CoNLL-2003 NER (span F1)",
    "pos": "UD EWT POS (accuracy)",
}
DATA_FOLDERS = {"sst5": "sst5", "ner": "conll2003", "pos": "ud_ewt"}
SETTINGS = ("fasttext", "fasttext+elmoc")
SPLITS = ("train", "dev", "test")

# One example: (tokens, label) for classification, (tokens, tags) for tagging.
Example = Tuple[List[str], object]


def log(message: str) -> None:
    print(message, flush=True)


# ---------------------------------------------------------------------- data


def read_sst5(data_dir: Path) -> Dict[str, List[Example]]:
    from allennlp_models.classification.dataset_readers.stanford_sentiment_tree_bank import (
        StanfordSentimentTreeBankDatasetReader,
    )

    reader = StanfordSentimentTreeBankDatasetReader(granularity="5-class", use_subtrees=False)
    splits = {}
    for split, name in (("train", "train.txt"), ("dev", "dev.txt"), ("test", "test.txt")):
        splits[split] = [
            ([token.text for token in instance["tokens"].tokens], instance["label"].label)
            for instance in reader.read(str(data_dir / "sst5" / name))
        ]
    return splits


def read_ner(data_dir: Path) -> Dict[str, List[Example]]:
    from allennlp.data.dataset_readers import Conll2003DatasetReader

    reader = Conll2003DatasetReader(tag_label="ner", coding_scheme="BIOUL")
    splits = {}
    for split, name in (("train", "eng.train"), ("dev", "eng.testa"), ("test", "eng.testb")):
        splits[split] = [
            ([token.text for token in instance["tokens"].tokens], list(instance["tags"].labels))
            for instance in reader.read(str(data_dir / "conll2003" / name))
        ]
    return splits


def read_conllu_upos(path: Path) -> List[Example]:
    """Words (no multiword-token lines, no empty nodes) and UPOS tags of each sentence."""
    examples: List[Example] = []
    words: List[str] = []
    tags: List[str] = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if not line:
                if words:
                    examples.append((words, tags))
                words, tags = [], []
            elif not line.startswith("#"):
                columns = line.split("\t")
                if columns[0].isdigit():
                    words.append(columns[1])
                    tags.append(columns[3])
    if words:
        examples.append((words, tags))
    return examples


def read_pos(data_dir: Path) -> Dict[str, List[Example]]:
    directory = data_dir / "ud_ewt"
    return {
        split: read_conllu_upos(directory / f"en_ewt-ud-{split}.conllu") for split in SPLITS
    }


READERS = {"sst5": read_sst5, "ner": read_ner, "pos": read_pos}


def lowercased(examples: Dict[str, List[Example]]) -> Dict[str, List[Example]]:
    """The examples with every token lowercased (labels unchanged)."""
    return {
        split: [([token.lower() for token in tokens], label) for tokens, label in data]
        for split, data in examples.items()
    }


def subsample(examples: List[Example], size: Optional[int], seed: int = 13) -> List[Example]:
    if size is None or len(examples) <= size:
        return examples
    chosen = sorted(random.Random(seed).sample(range(len(examples)), size))
    return [examples[index] for index in chosen]


# ---------------------------------------------------------------------- features


class Features:
    """
    Frozen features of every sentence of a task: fastText vectors `(n, d)` float32 and, when an
    embedder is given, the biLM's layers `(num_layers, n, D)` float16.
    """

    def __init__(self, embedder, vectors, batch_size: int) -> None:
        self.embedder = embedder
        self.vectors = vectors
        self.batch_size = batch_size
        self._word_cache: Dict[str, numpy.ndarray] = {}

    def fasttext(self, tokens: Sequence[str]) -> numpy.ndarray:
        rows = []
        for token in tokens:
            vector = self._word_cache.get(token)
            if vector is None:
                vector = self.vectors.word_vector(token)
                self._word_cache[token] = vector
            rows.append(vector)
        return numpy.stack(rows) if rows else numpy.zeros((0, self.vectors.dim), numpy.float32)

    def elmoc(self, sentences: List[List[str]], label: str) -> List[numpy.ndarray]:
        """Layers of every sentence, computed in length-sorted batches, in input order."""
        order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
        layers: List[Optional[numpy.ndarray]] = [None] * len(sentences)
        started, done = time.perf_counter(), 0
        total_tokens = sum(len(sentence) for sentence in sentences)
        last_report = started
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            arrays = self.embedder.embed_batch([sentences[index] for index in chunk])
            for index, array in zip(chunk, arrays):
                layers[index] = array.astype(numpy.float16)
            done += sum(len(sentences[index]) for index in chunk)
            now = time.perf_counter()
            if now - last_report > 30 or start + self.batch_size >= len(order):
                last_report = now
                log(
                    f"  ELMo-C layers of {label}: {done:,}/{total_tokens:,} tokens "
                    f"({done / max(now - started, 1e-9):,.0f} tokens/s)"
                )
        return layers  # type: ignore


# ---------------------------------------------------------------------- models


class Model(torch.nn.Module):
    """
    BiLSTM over [fastText; ELMo-C mix] (or fastText alone): a tagger (softmax per token) or a
    classifier (max pooling over tokens).
    """

    def __init__(
        self,
        fasttext_dim: int,
        num_labels: int,
        tagging: bool,
        elmoc_layers: int = 0,
        elmoc_dim: int = 0,
        hidden_dim: int = 128,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        from allennlp.modules.scalar_mix import ScalarMix

        self.tagging = tagging
        self.mix = ScalarMix(elmoc_layers) if elmoc_layers else None
        input_dim = fasttext_dim + (elmoc_dim if elmoc_layers else 0)
        self.dropout = torch.nn.Dropout(dropout)
        self.lstm = torch.nn.LSTM(input_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.output = torch.nn.Linear(2 * hidden_dim, num_labels)

    def forward(
        self, fasttext: torch.Tensor, mask: torch.BoolTensor, elmoc: Optional[torch.Tensor]
    ) -> torch.Tensor:
        inputs = fasttext
        if self.mix is not None:
            mixed = self.mix(list(elmoc.unbind(1)), mask)
            inputs = torch.cat([fasttext, mixed], dim=-1)
        lengths = mask.sum(-1).clamp(min=1).cpu()
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            self.dropout(inputs), lengths, batch_first=True, enforce_sorted=False
        )
        encoded, _ = self.lstm(packed)
        encoded, _ = torch.nn.utils.rnn.pad_packed_sequence(
            encoded, batch_first=True, total_length=mask.size(1)
        )
        encoded = self.dropout(encoded)
        if self.tagging:
            return self.output(encoded)
        pooled = encoded.masked_fill(~mask.unsqueeze(-1), -1e4).max(dim=1)[0]
        return self.output(pooled)


def make_batch(indices, fasttext, elmoc, labels, tagging):
    lengths = [len(fasttext[index]) for index in indices]
    width = max(max(lengths), 1)
    batch_size = len(indices)
    dim = fasttext[indices[0]].shape[-1]
    ft = numpy.zeros((batch_size, width, dim), numpy.float32)
    mask = numpy.zeros((batch_size, width), bool)
    target = (
        numpy.full((batch_size, width), -100, numpy.int64)
        if tagging
        else numpy.zeros(batch_size, numpy.int64)
    )
    layers = None
    if elmoc is not None:
        num_layers, _, elmoc_dim = elmoc[indices[0]].shape
        layers = numpy.zeros((batch_size, num_layers, width, elmoc_dim), numpy.float32)
    for row, index in enumerate(indices):
        length = lengths[row]
        ft[row, :length] = fasttext[index]
        mask[row, :length] = True
        if tagging:
            target[row, :length] = labels[index]
        else:
            target[row] = labels[index]
        if layers is not None:
            layers[row, :, :length] = elmoc[index]
    return (
        torch.from_numpy(ft),
        torch.from_numpy(mask),
        None if layers is None else torch.from_numpy(layers),
        torch.from_numpy(target),
    )


def batches(num_examples: int, lengths: List[int], batch_size: int, rng: Optional[random.Random]):
    """Length-bucketed batches (shuffled when `rng` is given)."""
    order = list(range(num_examples))
    if rng is not None:
        rng.shuffle(order)
    chunk = batch_size * 50
    result = []
    for start in range(0, len(order), chunk):
        window = sorted(order[start : start + chunk], key=lambda index: lengths[index])
        result.extend(window[i : i + batch_size] for i in range(0, len(window), batch_size))
    if rng is not None:
        rng.shuffle(result)
    return result


class Scorer:
    """Accuracy (classification, tagging) or BIOUL span F1 (NER), in percent."""

    def __init__(self, task: str, labels: List[str]) -> None:
        self.task = task
        self.labels = labels

    def __call__(self, predictions: List, gold: List) -> float:
        if self.task == "ner":
            from allennlp.data.dataset_readers.dataset_utils.span_utils import (
                bioul_tags_to_spans,
                InvalidTagSequence,
            )

            true_positives = predicted = actual = 0
            for predicted_ids, gold_ids in zip(predictions, gold):
                gold_spans = set(bioul_tags_to_spans([self.labels[i] for i in gold_ids]))
                try:
                    predicted_spans = set(
                        bioul_tags_to_spans([self.labels[i] for i in predicted_ids])
                    )
                except InvalidTagSequence:
                    predicted_spans = set()
                true_positives += len(gold_spans & predicted_spans)
                predicted += len(predicted_spans)
                actual += len(gold_spans)
            precision = true_positives / max(predicted, 1)
            recall = true_positives / max(actual, 1)
            return 100 * (2 * precision * recall / max(precision + recall, 1e-12))
        if self.task == "sst5":
            return 100 * float(numpy.mean([p == g for p, g in zip(predictions, gold)]))
        correct = sum(int(p == g) for ps, gs in zip(predictions, gold) for p, g in zip(ps, gs))
        return 100 * correct / max(sum(len(gs) for gs in gold), 1)


def evaluate(model, data, batch_size, scorer, tagging) -> float:
    fasttext, elmoc, labels = data
    lengths = [len(vectors) for vectors in fasttext]
    predictions: List = [None] * len(fasttext)
    model.eval()
    with torch.no_grad():
        for indices in batches(len(fasttext), lengths, batch_size, rng=None):
            ft, mask, layers, _ = make_batch(indices, fasttext, elmoc, labels, tagging)
            best = model(ft, mask, layers).argmax(-1)
            for row, index in enumerate(indices):
                predictions[index] = (
                    best[row, : lengths[index]].tolist() if tagging else int(best[row])
                )
    return scorer(predictions, labels)


def train_one(task, setting, seed, prepared, args) -> Dict[str, float]:
    splits, label_list, num_classes, tagging, fasttext_dim, elmoc_shape = prepared
    torch.manual_seed(seed)
    rng = random.Random(seed)
    use_elmoc = setting == "fasttext+elmoc"
    model = Model(
        fasttext_dim,
        num_classes,
        tagging,
        elmoc_layers=elmoc_shape[0] if use_elmoc else 0,
        elmoc_dim=elmoc_shape[1] if use_elmoc else 0,
        hidden_dim=args.hidden_dim,
    )
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    scorer = Scorer(task, label_list)

    def split_data(split):
        fasttext, elmoc, labels = splits[split]
        return fasttext, elmoc if use_elmoc else None, labels

    train = split_data("train")
    lengths = [len(vectors) for vectors in train[0]]
    best = {"dev": -1.0, "epoch": 0}
    best_state = None
    for epoch in range(1, args.epochs + 1):
        started = time.perf_counter()
        model.train()
        total_loss, steps = 0.0, 0
        for indices in batches(len(lengths), lengths, args.batch_size, rng):
            ft, mask, layers, target = make_batch(indices, *train, tagging)
            logits = model(ft, mask, layers)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            total_loss += loss.item()
            steps += 1
        dev = evaluate(model, split_data("dev"), args.batch_size * 2, scorer, tagging)
        if dev > best["dev"]:
            best = {"dev": dev, "epoch": epoch}
            best_state = {name: value.clone() for name, value in model.state_dict().items()}
        log(
            f"  [{task} | {setting} | seed {seed}] epoch {epoch}/{args.epochs}: "
            f"loss {total_loss / max(steps, 1):.3f}, dev {dev:.2f} "
            f"({time.perf_counter() - started:.0f}s)"
        )
    # The test score of the epoch with the best dev score.
    model.load_state_dict(best_state)
    best["test"] = evaluate(model, split_data("test"), args.batch_size * 2, scorer, tagging)
    log(
        f"  [{task} | {setting} | seed {seed}] best dev epoch {best['epoch']}: "
        f"test {best['test']:.2f}"
    )
    if model.mix is not None:
        with torch.no_grad():
            weights = torch.softmax(torch.cat(list(model.mix.scalar_parameters)), 0)
            best["mix_weights"] = [round(float(w), 3) for w in weights]
            best["gamma"] = round(float(model.mix.gamma), 3)
    return best


def prepare_task(task, examples, features, use_elmoc):
    """
    Features and label ids of every split. Labels are numbered training labels first (the
    classes the models predict), then any seen only in dev or test (which count as errors).
    """
    tagging = task != "sst5"

    def labels_of(split):
        if tagging:
            return {tag for _, tags in examples[split] for tag in tags}
        return {label for _, label in examples[split]}

    label_list = sorted(labels_of("train"))
    num_classes = len(label_list)
    label_list += sorted((labels_of("dev") | labels_of("test")) - set(label_list))
    label_index = {label: index for index, label in enumerate(label_list)}
    splits = {}
    for split in SPLITS:
        sentences = [tokens for tokens, _ in examples[split]]
        fasttext = [features.fasttext(tokens) for tokens in sentences]
        if tagging:
            labels = [[label_index[tag] for tag in tags] for _, tags in examples[split]]
        else:
            labels = [label_index[label] for _, label in examples[split]]
        elmoc = features.elmoc(sentences, f"{task}/{split}") if use_elmoc else None
        splits[split] = (fasttext, elmoc, labels)
    return splits, label_list, num_classes, tagging


def summarize(results: Dict[str, Dict[str, List[Dict[str, float]]]]) -> str:
    """A markdown table: per task and setting, mean +- sample std over seeds of dev and test."""

    def cell(values: List[float]) -> str:
        mean = float(numpy.mean(values))
        if len(values) < 2:
            return f"{mean:.2f}"
        return f"{mean:.2f} ± {float(numpy.std(values, ddof=1)):.2f}"

    lines = [
        "| task | input | seeds | dev | test |",
        "|---|---|---|---|---|",
    ]
    for task, by_setting in results.items():
        for setting, runs in by_setting.items():
            lines.append(
                f"| {TASK_NAMES[task]} | {setting.replace('+', ' + ').replace('elmoc', 'ELMo-C')} "
                f"| {len(runs)} | {cell([run['dev'] for run in runs])} "
                f"| {cell([run['test'] for run in runs])} |"
            )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE, help="ELMo-C biLM archive")
    parser.add_argument("--vectors-path", type=str, default=None,
                        help="the biLM's fastText .bin, if not where the archive says")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                        help="with sst5/, conll2003/ and ud_ewt/")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--max-train", type=int, default=2000,
                        help="training sentences per task (a fixed random subset); 0 for all")
    parser.add_argument("--max-eval", type=int, default=0,
                        help="dev and test sentences per task (a fixed random subset); 0 for all")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--elmoc-batch-size", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch threads (these models are small: one is fastest on a shared 2-core machine)",
    )
    parser.add_argument(
        "--lowercase", action="store_true",
        help="lowercase every token (for both settings); the default follows the archive "
        "(its fastText indexer's lowercase_tokens, true for the PTB quickstart's biLM)",
    )
    parser.add_argument(
        "--output-dir", type=Path, default=REPO_ROOT / "runs" / "downstream_evidence"
    )
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    if not args.archive.exists():
        log(
            f"No biLM archive at {args.archive}. Make one with `make demo` (the PTB quickstart) or "
            "pass --archive."
        )
        return 1
    missing = [task for task in args.tasks if not (args.data_dir / DATA_FOLDERS[task]).is_dir()]
    if missing:
        log(f"No data for {missing} under {args.data_dir} (pass --data-dir).")
        return 1

    from elmoc_allennlp.modules.elmoc_embedder import ElmocEmbedder
    from elmoc_allennlp.common.fasttext_vectors import FastTextVectors
    from elmoc_allennlp.common.atomic_files import atomic_write

    log(f"==> Loading the ELMo-C biLM {args.archive}")
    embedder = ElmocEmbedder(str(args.archive), vectors_path=args.vectors_path)
    vectors = FastTextVectors.from_path(embedder.bilm.archive.input_vectors_path)
    log(
        f"    {embedder.num_layers} layers of {embedder.output_dim} dims; fastText "
        f"{vectors.path} ({vectors.dim} dims)"
    )
    lowercase = args.lowercase or embedder.bilm.archive.lowercase_tokens
    if lowercase:
        reason = "--lowercase" if args.lowercase else "as in the biLM's pretraining"
        log(f"    tokens are lowercased ({reason})")
    features = Features(embedder, vectors, args.elmoc_batch_size)
    results: Dict[str, Dict[str, List[Dict[str, float]]]] = {}
    sizes: Dict[str, Dict[str, int]] = {}
    for task in args.tasks:
        log(f"==> {TASK_NAMES[task]}: reading {args.data_dir}")
        examples = READERS[task](args.data_dir)
        if lowercase:
            examples = lowercased(examples)
        full_train = len(examples["train"])
        examples["train"] = subsample(examples["train"], args.max_train or None)
        for split in ("dev", "test"):
            examples[split] = subsample(examples[split], args.max_eval or None)
        sizes[task] = {split: len(examples[split]) for split in SPLITS}
        sizes[task]["train_available"] = full_train
        log(
            f"    train {sizes[task]['train']:,} of {full_train:,} sentences, dev "
            f"{sizes[task]['dev']:,}, test {sizes[task]['test']:,}"
        )
        splits, label_list, num_classes, tagging = prepare_task(
            task, examples, features, use_elmoc=True
        )
        shape = (embedder.num_layers, embedder.output_dim)
        prepared = (splits, label_list, num_classes, tagging, vectors.dim, shape)
        results[task] = {}
        for setting in SETTINGS:
            results[task][setting] = []
            for seed in range(1, args.seeds + 1):
                results[task][setting].append(train_one(task, setting, seed, prepared, args))
        del splits, prepared
        log(summarize({task: results[task]}))

    table = summarize(results)
    elapsed = time.perf_counter() - started
    log(f"\n==> Results ({elapsed / 60:.1f} minutes)\n{table}")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.output_dir / "results.md", "w") as results_md:
        results_md.write(table + "\n")
    with atomic_write(args.output_dir / "results.json", "w") as results_json:
        results_json.write(json.dumps(
            {
                "archive": str(args.archive),
                "num_layers": embedder.num_layers,
                "elmoc_dim": embedder.output_dim,
                "fasttext_dim": vectors.dim,
                "lowercase": lowercase,
                "arguments": {k: str(v) for k, v in vars(args).items()},
                "sizes": sizes,
                "minutes": round(elapsed / 60, 1),
                "results": results,
            },
            indent=2,
        ))
    log(f"Wrote {args.output_dir / 'results.md'} and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
