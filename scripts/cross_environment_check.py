"""
A downstream archive trained in one environment evaluates in another to the same metrics.

    A/bin/python -m scripts.cross_environment_check train OUT        # fastText, biLM, POS tagger
    A/bin/python -m scripts.cross_environment_check evaluate OUT     # `allennlp evaluate`, saved
    B/bin/python -m scripts.cross_environment_check evaluate OUT     # compared with A's: |diff| <= 1e-4

`train` builds, in the running environment, a tiny fastText model, the tiny ELMo-C biLM of the tests
(`tests/fixtures/elmoc_tiny.jsonnet`) and a POS tagger with it (`examples/equal_compute_study/
ud_pos_tagger.jsonnet`, ten epochs on the fixture treebank). `evaluate` runs `python -m allennlp
evaluate` on the tagger archive in the running environment, writes `OUT/metrics-<env>.json` and
compares every metric with those of the other environments already evaluated; it exits 1 if one
differs by more than 1e-4. The environment name is `published` (torch < 2) or `modern`.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4


def environment_name() -> str:
    import torch

    return "published" if int(torch.__version__.split(".")[0]) < 2 else "modern"


def describe() -> str:
    import torch

    return f"{environment_name()} (CPython {sys.version.split()[0]}, torch {torch.__version__})"


def train(out: Path) -> None:
    import torch
    from allennlp.commands.train import train_model_from_file
    from allennlp.common.util import import_module_and_submodules

    from elmoc_allennlp.fasttext.training import train_fasttext
    from tests.conftest import FIXTURES_ROOT, LM_CORPUS, TINY_FASTTEXT_OPTIONS

    torch.set_num_threads(1)
    import_module_and_submodules("allennlp_models")
    import_module_and_submodules("elmoc_allennlp")
    import_module_and_submodules("examples.equal_compute_study")
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    corpus.write_text(
        "".join(p.read_text() for p in sorted(LM_CORPUS.glob("*.txt"))), encoding="utf-8"
    )
    fasttext_path = train_fasttext(corpus, out / "tiny.bin", **TINY_FASTTEXT_OPTIONS)
    os.environ.update(
        ELMOC_TEST_FASTTEXT=str(fasttext_path), ELMOC_TEST_FIXTURES=str(FIXTURES_ROOT)
    )
    train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(out / "bilm"),
        overrides=json.dumps({"trainer.num_epochs": 1}),
    )
    pos_data = str(FIXTURES_ROOT / "downstream" / "ud_pos.conllu")
    os.environ.update(
        ELMOC_ARCHIVE=str(out / "bilm" / "model.tar.gz"),
        ELMOC_DIM="12",
        ELMOC_FASTTEXT=str(fasttext_path),
        ELMOC_FASTTEXT_DIM="16",
        POS_TRAIN_DATA_PATH=pos_data,
        POS_VALIDATION_DATA_PATH=pos_data,
        POS_TEST_DATA_PATH=pos_data,
    )
    train_model_from_file(
        str(REPO / "examples" / "equal_compute_study" / "ud_pos_tagger.jsonnet"),
        str(out / "pos"),
        overrides=json.dumps({"trainer.num_epochs": 10}),
    )
    (out / "trained-in.txt").write_text(describe() + "\n")
    print(f"trained in {describe()}: {out / 'pos' / 'model.tar.gz'}")


def evaluate(out: Path) -> int:
    from tests.conftest import FIXTURES_ROOT

    metrics_file = out / f"metrics-{environment_name()}.json"
    command = [
        sys.executable,
        "-m",
        "allennlp",
        "evaluate",
        str(out / "pos" / "model.tar.gz"),
        str(FIXTURES_ROOT / "downstream" / "ud_pos.conllu"),
        "--output-file",
        str(metrics_file),
        "--include-package",
        "elmoc_allennlp",
        "--include-package",
        "allennlp_models",
        "--include-package",
        "examples.equal_compute_study",
    ]
    subprocess.run(command, check=True, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"))
    metrics = json.loads(metrics_file.read_text())
    trained_in = (out / "trained-in.txt").read_text().strip()
    print(f"archive trained in {trained_in}, evaluated in {describe()}: {json.dumps(metrics)}")
    worst = 0.0
    for other in sorted(out.glob("metrics-*.json")):
        if other == metrics_file:
            continue
        reference = json.loads(other.read_text())
        assert sorted(reference) == sorted(metrics), (
            other.name,
            sorted(reference),
            sorted(metrics),
        )
        for name, value in metrics.items():
            difference = abs(value - reference[name])
            worst = max(worst, difference)
            print(
                f"  {name}: {value:.6f} here, {reference[name]:.6f} in {other.stem[8:]} (|diff| {difference:.1e})"
            )
    print(f"largest difference {worst:.1e} (tolerance {TOLERANCE:g})")
    return 0 if worst <= TOLERANCE else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("step", choices=["train", "evaluate"])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.step == "train":
        train(args.out)
        return 0
    return evaluate(args.out)


if __name__ == "__main__":
    sys.exit(main())
