"""scripts/evaluate_downstream.py on tiny synthetic data in the formats of ../shared/data."""
import importlib.util
import json
import random

import numpy
import pytest

from tests.downstream.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "evaluate_downstream", REPO_ROOT / "scripts" / "evaluate_downstream.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "home", "fast"]
NAMES = [("Paris", "LOC"), ("Acme", "ORG"), ("Smith", "PER")]


def write_synthetic_data(root):
    rng = random.Random(0)
    (root / "sst5").mkdir()
    (root / "conll2003").mkdir()
    (root / "ud_ewt").mkdir()
    for split, count in (("train", 12), ("dev", 6), ("test", 6)):
        trees = []
        for _ in range(count):
            words = rng.sample(WORDS, 3)
            label = rng.randrange(5)
            first, second, third = words
            trees.append(f"({label} ({label} {first}) ({label} ({label} {second}) (2 {third})))")
        (root / "sst5" / f"{split}.txt").write_text("\n".join(trees) + "\n")
    for name, count in (("eng.train", 12), ("eng.testa", 6), ("eng.testb", 6)):
        lines = ["-DOCSTART- -X- O O", ""]
        for _ in range(count):
            name_word, kind = rng.choice(NAMES)
            for word in rng.sample(WORDS, 3):
                lines.append(f"{word} NN I-NP O")
            lines.append(f"{name_word} NNP I-NP I-{kind}")
            lines.append("")
        (root / "conll2003" / name).write_text("\n".join(lines) + "\n")
    for split, count in (("train", 12), ("dev", 6), ("test", 6)):
        lines = []
        for index in range(count):
            lines += [f"# sent_id = {split}-{index}", "# text = the cat's mat"]
            lines += [
                "1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_",
                "2-3\tcat's\t_\t_\t_\t_\t_\t_\t_\t_",
                "2\tcat\tcat\tNOUN\tNN\t_\t4\tnmod\t_\t_",
                "3\t's\t's\tPART\tPOS\t_\t2\tcase\t_\t_",
                "3.1\tempty\t_\t_\t_\t_\t_\t_\t_\t_",
                "4\tmat\tmat\tNOUN\tNN\t_\t0\troot\t_\t_",
                "",
            ]
        (root / "ud_ewt" / f"en_ewt-ud-{split}.conllu").write_text("\n".join(lines) + "\n")


def test_conllu_reader_skips_multiword_tokens_and_empty_nodes(script, tmp_path):
    write_synthetic_data(tmp_path)
    examples = script.read_conllu_upos(tmp_path / "ud_ewt" / "en_ewt-ud-dev.conllu")
    assert len(examples) == 6
    assert examples[0] == (["the", "cat", "'s", "mat"], ["DET", "NOUN", "PART", "NOUN"])


def test_lowercasing_changes_tokens_only(script, tmp_path):
    write_synthetic_data(tmp_path)
    examples = script.read_ner(tmp_path)
    lowered = script.lowercased(examples)
    assert lowered.keys() == examples.keys()
    for split in examples:
        for (tokens, tags), (low_tokens, low_tags) in zip(examples[split], lowered[split]):
            assert low_tokens == [token.lower() for token in tokens] and low_tags == tags
    assert any("Paris" in tokens for tokens, _ in examples["train"])
    assert not any("Paris" in tokens for tokens, _ in lowered["train"])


def test_span_f1_and_summary_table(script):
    labels = ["O", "U-PER", "B-ORG", "L-ORG"]
    scorer = script.Scorer("ner", labels)
    gold = [[1, 0, 2, 3], [0, 1]]
    # One of three gold spans found, plus one wrong span: P = 1/2, R = 1/3.
    predicted = [[1, 0, 0, 0], [1, 0]]
    assert scorer(predicted, gold) == pytest.approx(100 * 2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert script.Scorer("pos", labels)([[0, 1], [2]], [[0, 0], [2]]) == pytest.approx(200 / 3)
    table = script.summarize(
        {"sst5": {"fasttext": [{"dev": 40.0, "test": 41.0}, {"dev": 42.0, "test": 45.0}]}}
    )
    std = numpy.std([41.0, 45.0], ddof=1)
    assert f"| SST-5 (accuracy) | fasttext | 2 | 41.00 ± 1.41 | 43.00 ± {std:.2f} |" in table


def test_script_trains_both_settings_on_every_task(script, tmp_path, elmoc_archive, capsys):
    data = tmp_path / "data"
    data.mkdir()
    write_synthetic_data(data)
    output = tmp_path / "out"
    code = script.main([
        "--archive", str(elmoc_archive), "--data-dir", str(data), "--seeds", "2",
        "--epochs", "2", "--max-train", "10", "--output-dir", str(output),
    ])
    assert code == 0
    results = json.loads((output / "results.json").read_text())
    assert results["sizes"]["sst5"]["train"] == 10
    assert results["sizes"]["sst5"]["train_available"] == 12
    for task in ("sst5", "ner", "pos"):
        for setting in ("fasttext", "fasttext+elmoc"):
            runs = results["results"][task][setting]
            assert len(runs) == 2
            for run in runs:
                assert 0.0 <= run["dev"] <= 100.0 and 0.0 <= run["test"] <= 100.0
                assert 1 <= run["epoch"] <= 2
        mix = results["results"][task]["fasttext+elmoc"][0]["mix_weights"]
        assert len(mix) == 3 and sum(mix) == pytest.approx(1.0, abs=1e-2)
    table = (output / "results.md").read_text()
    assert table.count("\n") == 2 + 6
    printed = capsys.readouterr().out
    assert "epoch 2/2" in printed and "ELMo-C layers of pos/test" in printed


def test_script_explains_a_missing_archive_or_data(script, tmp_path, capsys):
    assert script.main(["--archive", str(tmp_path / "none.tar.gz")]) == 1
    assert "make demo" in capsys.readouterr().out
