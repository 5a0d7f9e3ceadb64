"""`allennlp elmoc-fasttext`: trains a fastText `.bin` that the plugin's reader loads."""

import sys
from pathlib import Path

import numpy
import pytest

from allennlp.commands import main
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.fasttext.health import DegenerateVectorsError, epochs_for, measure_vector_health

CORPUS = Path(__file__).parents[1] / "fixtures" / "lm_corpus" / "train-00001-of-00002.txt"


def run(monkeypatch, *arguments: str) -> None:
    monkeypatch.setattr(sys, "argv", ["allennlp", "elmoc-fasttext", *arguments])
    main(prog="allennlp")


def test_trains_a_bin_with_the_options_given(monkeypatch, tmp_path):
    output = tmp_path / "vectors.bin"
    # The sizes of the session's tiny model (tests/conftest.py).
    run(
        monkeypatch,
        str(CORPUS),
        str(output),
        "--dim",
        "16",
        "--min-count",
        "1",
        "--minn",
        "2",
        "--maxn",
        "4",
        "--bucket",
        "20000",
        "--epoch",
        "2",
    )
    vectors = FastTextVectors(output)
    assert (vectors.dim, vectors.bucket, vectors.minn, vectors.maxn) == (16, 20000, 2, 4)
    # --min-count 1: every word of the corpus has its own row, and a vector that is not zero.
    words = {
        word for line in CORPUS.read_text(encoding="utf-8").splitlines() for word in line.split()
    }
    assert all(vectors.word_id(word) >= 0 for word in words)
    assert all(numpy.abs(vectors.word_vector(word)).sum() > 0 for word in words)
    assert [path.name for path in tmp_path.iterdir()] == ["vectors.bin"]  # no partial file left


def test_keeps_an_existing_output_unless_forced(monkeypatch, tmp_path):
    output = tmp_path / "vectors.bin"
    output.write_bytes(b"precious")
    with pytest.raises(ConfigurationError, match="exists; pass --force"):
        run(
            monkeypatch,
            str(CORPUS),
            str(output),
            "--dim",
            "16",
            "--min-count",
            "1",
            "--bucket",
            "20000",
        )
    assert output.read_bytes() == b"precious"
    run(
        monkeypatch,
        str(CORPUS),
        str(output),
        "--dim",
        "16",
        "--min-count",
        "1",
        "--bucket",
        "20000",
        "--epoch",
        "2",
        "--force",
    )
    assert FastTextVectors(output).dim == 16


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["missing.txt", "out.bin"], "corpus missing.txt is not a file"),
        ([str(CORPUS), "out.bin", "--dim", "0"], "--dim must be positive"),
        ([str(CORPUS), "out.bin", "--minn", "5", "--maxn", "3"], "--maxn 3 is below --minn 5"),
        ([str(CORPUS), str(CORPUS)], "exists|is the corpus"),
    ],
)
def test_bad_arguments_name_the_cause_and_write_nothing(monkeypatch, tmp_path, arguments, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=message):
        run(monkeypatch, *arguments)
    assert not (tmp_path / "out.bin").exists()


def _stub_fasttext(monkeypatch, matrix):
    from elmoc_allennlp.fasttext import training as fasttext_training
    from tests.fasttext.test_training import _FastText

    stub = _FastText([matrix])
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: stub)
    return stub


def test_degenerate_vectors_stop_the_command_with_the_remedy(monkeypatch, tmp_path):
    from tests.fasttext.test_training import _degenerate

    _stub_fasttext(monkeypatch, _degenerate())
    output = tmp_path / "vectors.bin"
    tokens = sum(len(line.split()) for line in CORPUS.read_text(encoding="utf-8").splitlines())
    # --epoch 3, below what the rule picks for the corpus: the remedy is the rule's epochs.
    rule = epochs_for(tokens)
    remedy = (
        f"Train the {rule} epochs the rule picks for {tokens:,} tokens \\(this run: 3\\): "
        f"leave --epoch out, or --epoch {rule}\\."
    )
    with pytest.raises(DegenerateVectorsError, match=r"vectors\.bin are degenerate: .*" + remedy):
        run(monkeypatch, str(CORPUS), str(output), "--dim", "4", "--epoch", "3")
    assert list(tmp_path.iterdir()) == []
    _stub_fasttext(monkeypatch, _degenerate())
    run(monkeypatch, str(CORPUS), str(output), "--dim", "4", "--epoch", "3", "--allow-degenerate")
    assert FastTextVectors(output).dim == 4


def test_epochs_follow_the_corpus_and_the_figures_are_printed(monkeypatch, tmp_path, capsys):
    from tests.fasttext.test_training import _good

    stub = _stub_fasttext(monkeypatch, _good())
    output = tmp_path / "vectors.bin"
    run(monkeypatch, str(CORPUS), str(output), "--dim", "4")
    tokens = sum(len(line.split()) for line in CORPUS.read_text(encoding="utf-8").splitlines())
    assert stub.kwargs["epoch"] == epochs_for(tokens) > 5
    health = measure_vector_health(output)
    printed = capsys.readouterr().out
    assert (
        f"written to {output}: healthy (degenerate from a mean cosine of 0.5 or 50% near duplicates): "
        f"mean pairwise cosine of the 5 most frequent words {health.mean_cosine:.3f}"
    ) in printed
