"""`train_fasttext` never saves a matrix the fastText package left partly uninitialised."""
from pathlib import Path
from typing import List

import numpy
import pytest

from elmoc_allennlp.common import fasttext_training
from elmoc_allennlp.common.fasttext_vectors import MAX_ABS_VALUE


class _Model:
    def __init__(self, matrix: numpy.ndarray) -> None:
        self.matrix = matrix

    def get_input_matrix(self) -> numpy.ndarray:
        return self.matrix

    def save_model(self, path: str) -> None:
        Path(path).write_bytes(self.matrix.tobytes())


class _FastText:
    """Returns the given matrices, one per `train_unsupervised` call."""

    def __init__(self, matrices: List[numpy.ndarray]) -> None:
        self.matrices = list(matrices)
        self.calls = 0

    def train_unsupervised(self, *args, **kwargs) -> _Model:
        self.calls += 1
        return _Model(self.matrices.pop(0))


def _good() -> numpy.ndarray:
    return numpy.full((6, 4), 0.01, dtype=numpy.float32)


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
    assert output.read_bytes() == _good().tobytes()


def test_three_bad_trainings_raise_and_write_nothing(monkeypatch, tmp_path):
    stub = _FastText([_with_row(3.5e17)] * 3)
    monkeypatch.setattr(fasttext_training, "import_fasttext", lambda: stub)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="1 uninitialised row"):
        fasttext_training.train_fasttext(corpus, tmp_path / "out.bin", dim=4)
    assert stub.calls == 3
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]
