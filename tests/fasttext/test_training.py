"""
`train_fasttext` never saves a matrix the fastText package left partly uninitialised, nor
degenerate vectors, and chooses its epochs from the corpus size.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import numpy
import pytest

from elmoc_allennlp.fasttext import training as fasttext_training
from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.fasttext.vectors import MAX_ABS_VALUE, FastTextVectors
from elmoc_allennlp.fasttext.health import DegenerateVectorsError, epochs_for, more_epochs_remedy


class _Model:
    def __init__(self, matrix: numpy.ndarray) -> None:
        self.matrix = matrix

    def get_input_matrix(self) -> numpy.ndarray:
        return self.matrix

    def save_model(self, path: str) -> None:
        words = ["</s>"] + [f"w{index}" for index in range(len(self.matrix) - 1)]
        write_fasttext_bin(path, words, self.matrix, minn=3, maxn=0, bucket=0)


class _FastText:
    """Returns the given matrices, one per `train_unsupervised` call."""

    def __init__(self, matrices: List[numpy.ndarray]) -> None:
        self.matrices = list(matrices)
        self.calls = 0

    def train_unsupervised(self, *args, **kwargs) -> _Model:
        self.calls += 1
        self.kwargs = kwargs
        return _Model(self.matrices.pop(0))


def _good() -> numpy.ndarray:
    return numpy.random.default_rng(0).uniform(-0.25, 0.25, (6, 4)).astype(numpy.float32)


def _degenerate() -> numpy.ndarray:
    return (0.5 + 0.001 * _good()).astype(numpy.float32)


def _saved_matrix(path: Path) -> numpy.ndarray:
    return FastTextVectors(path).input_matrix.numpy()


def _with_row(value: float) -> numpy.ndarray:
    matrix = _good()
    matrix[-1] = 0.0
    matrix[-1, 0] = value
    return matrix


@pytest.mark.parametrize("bad_value", [0.0, float("nan"), float("inf"), 3.5e17, -MAX_ABS_VALUE])
def test_a_matrix_with_an_uninitialised_row_is_trained_again(monkeypatch, tmp_path, bad_value):
    stub = _FastText([_with_row(bad_value), _good()])
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: stub)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    output = fasttext_training.train_fasttext(corpus, tmp_path / "out.bin", dim=4)
    assert stub.calls == 2
    numpy.testing.assert_array_equal(_saved_matrix(output), _good())


def test_three_bad_trainings_raise_and_write_nothing(monkeypatch, tmp_path):
    stub = _FastText([_with_row(3.5e17)] * 3)
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: stub)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="1 uninitialised row"):
        fasttext_training.train_fasttext(corpus, tmp_path / "out.bin", dim=4)
    assert stub.calls == 3
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]


def test_degenerate_vectors_are_refused_and_an_existing_file_kept(monkeypatch, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    output = tmp_path / "out.bin"
    output.write_bytes(b"precious")
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: _FastText([_degenerate()]))
    # 7 epochs, fewer than the rule's for 3 tokens: the remedy names the rule's.
    with pytest.raises(
        DegenerateVectorsError,
        match=r"out\.bin are degenerate: .* --epoch 1666667\. Nothing was written",
    ):
        fasttext_training.train_fasttext(corpus, output, dim=4, epoch=7)
    assert output.read_bytes() == b"precious"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "out.bin"]
    # Allowed: saved, with the same figures in a warning.
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: _FastText([_degenerate()]))
    fasttext_training.train_fasttext(corpus, output, dim=4, epoch=7, allow_degenerate=True)
    numpy.testing.assert_array_equal(_saved_matrix(output), _degenerate())


def test_the_remedy_names_the_epochs_the_rule_picks():
    # Issue #48: 10 epochs on 110k tokens were refused, and the remedy said --epoch 20; the rule picks 46.
    assert epochs_for(110_000) == 46
    assert more_epochs_remedy(10, 110_000) == (
        "Train the 46 epochs the rule picks for 110,000 tokens (this run: 10): leave --epoch out, or --epoch 46."
    )
    # Already the rule's (or more): twice as many.
    assert more_epochs_remedy(46, 110_000) == (
        "Train more epochs than this run's 46 (the rule picks 46 for 110,000 tokens): --epoch 92, "
        "or give a larger corpus."
    )


def test_degenerate_vectors_at_the_rules_epochs_name_twice_as_many(monkeypatch, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n" * 100_000, encoding="utf-8")
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: _FastText([_degenerate()]))
    with pytest.raises(
        DegenerateVectorsError,
        match=r"this run's 17 \(the rule picks 17 for 300,000 tokens\): --epoch 34,",
    ):
        fasttext_training.train_fasttext(corpus, tmp_path / "out.bin", dim=4)


@pytest.mark.parametrize("epoch, expected", [(None, epochs_for(7)), (3, 3)])
def test_epochs_follow_the_corpus_size_unless_given(monkeypatch, tmp_path, epoch, expected):
    stub = _FastText([_good()])
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: stub)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n\nd  e f g\n", encoding="utf-8")
    fasttext_training.train_fasttext(corpus, tmp_path / "out.bin", dim=4, epoch=epoch)
    assert stub.kwargs["epoch"] == expected
    assert epochs_for(7) == 714_286  # 5M token passes


_TRAIN_AND_PRINT_TAIL = """
import json, sys
import fasttext
from elmoc_allennlp.fasttext.training import train_fasttext
train_fasttext(sys.argv[1], sys.argv[2], dim=16, min_count=1, minn=2, maxn=4, bucket=20000,
               epoch=1, thread=1)
values = fasttext.load_model(sys.argv[2]).get_input_matrix().reshape(-1)
print(json.dumps([values.size % 10, values[-(values.size % 10):].tolist()]))
"""


def test_every_value_of_the_input_matrix_is_initialised(tmp_path):
    """
    fastText sets its input matrix in blocks of m*n/10 values, one per thread: with 10 threads
    the last m*n mod 10 values kept whatever memory held (zeros, or 3.5e17 under load). Asked for
    1 thread, `train_fasttext` uses enough that they are set too. Run in a fresh process whose
    allocator fills new memory with 0x7f bytes (3.4e38 as float32; glibc's `MALLOC_PERTURB_`, the
    heap used for the matrix), so that a value left unset is unmistakable.

    Slow (~8 s): the fresh process really trains fastText an epoch on the fixture corpus, because
    the values checked are set by fastText's own initialisation, at a size (20,144 x 16) whose
    tenth blocks leave a remainder.
    """
    pytest.importorskip("fasttext")
    corpus = Path(__file__).parents[1] / "fixtures" / "lm_corpus" / "train-00001-of-00002.txt"
    environment = dict(os.environ, MALLOC_PERTURB_="128", MALLOC_MMAP_THRESHOLD_="1000000000")
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN_AND_PRINT_TAIL, str(corpus), str(tmp_path / "out.bin")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    remainder, tail = json.loads(done.stdout.strip().splitlines()[-1])
    assert remainder == 4  # 20,144 rows x 16: four values past the tenth block
    # fastText starts every value in uniform(-1/16, 1/16); one short epoch barely moves them.
    assert all(0 < abs(value) < 0.5 for value in tail), tail
