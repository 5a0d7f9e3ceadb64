"""The pretraining configs build, and the paper-size one has the paper's parameter count."""
import os
from pathlib import Path

import pytest
import torch

from allennlp.common import Params
from allennlp.data import Vocabulary
from allennlp.models import Model

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.common.fasttext_training import train_fasttext
from tests.conftest import LM_CORPUS

PRETRAIN_CONFIGS = Path(__file__).resolve().parents[1] / "training_configs" / "pretrain"


@pytest.fixture(scope="module")
def corpus_environment(tmp_path_factory):
    """fastText vectors of the configs' input dimensions, and the fixture corpus as data paths."""
    directory = tmp_path_factory.mktemp("configs")
    corpus = directory / "corpus.txt"
    corpus.write_text((LM_CORPUS / "train-00002-of-00002.txt").read_text())
    vectors = {}
    for dim in (100, 300):
        vectors[dim] = train_fasttext(
            corpus, directory / f"ft{dim}.bin", dim=dim, min_count=1, bucket=20000, epoch=1, thread=1
        )
    return {
        "ELMOC_TRAIN_DATA": str(LM_CORPUS / "train-*.txt"),
        "ELMOC_VALIDATION_DATA": str(LM_CORPUS / "valid.txt"),
        "vectors": vectors,
    }


def _model_params(config: str, environment, dim: int) -> Params:
    ext_vars = {
        "ELMOC_FASTTEXT": str(environment["vectors"][dim]),
        "ELMOC_TRAIN_DATA": environment["ELMOC_TRAIN_DATA"],
        "ELMOC_VALIDATION_DATA": environment["ELMOC_VALIDATION_DATA"],
    }
    return Params.from_file(str(PRETRAIN_CONFIGS / config), ext_vars=ext_vars)


def _trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_paper_config_has_76m_trainable_parameters(corpus_environment):
    params = _model_params("elmoc.jsonnet", corpus_environment, 300)
    assert params["trainer"]["learning_rate_scheduler"]["type"] == "elmoc_rnmt_plus"
    with torch.device("meta"):
        model = Model.from_params(vocab=Vocabulary.empty(), params=params["model"])
    count = _trainable(model)
    # Paper, Tables 2 and 4: ELMo-C has 76M trainable parameters.
    assert abs(count - 76_000_000) <= 1_000_000, count
    # Closed form: input projection + LayerNorm, 4 LSTM-with-projection layers, shared head.
    d, p, c = 300, 512, 4096
    layer = p * 4 * c + (p * 4 * c + 4 * c) + c * p + 2 * p
    assert count == d * p + 2 * p + 4 * layer + (p * d + d)


def test_small_config_builds_and_is_small(corpus_environment):
    params = _model_params("elmoc_small.jsonnet", corpus_environment, 100)
    model = Model.from_params(vocab=Vocabulary.empty(), params=params["model"])
    assert 1_000_000 < _trainable(model) < 5_000_000
    assert params["data_loader"]["batch_sampler"]["batch_size"] == 64
