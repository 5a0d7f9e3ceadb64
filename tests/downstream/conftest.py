"""
Fixtures for the downstream configs: the environment they read, pointing at tiny task data and
the tiny biLM archive of `tests/conftest.py`; and what the tests of `elmoc_allennlp/downstream/`
share: the tiny biLM as `ElmocBiLm`, its indexer, and its layers computed the pretraining way.
"""

from pathlib import Path
from typing import Dict

import pytest
import torch

from allennlp.data import Batch
from allennlp.models.archival import load_archive

from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.downstream.elmoc import ElmocBiLm
from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from tests.conftest import FIXTURES_ROOT

DOWNSTREAM_FIXTURES = FIXTURES_ROOT / "downstream"
REPO_ROOT = Path(__file__).resolve().parents[2]
DOWNSTREAM_CONFIGS = REPO_ROOT / "training_configs" / "downstream"


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every downstream test runs on one torch thread (see `tests/conftest.py`)."""


@pytest.fixture
def downstream_environment(monkeypatch, elmoc_archive, tiny_fasttext_path) -> Dict[str, str]:
    """The environment variables the downstream configs read, pointing at tiny fixtures."""
    fixtures = DOWNSTREAM_FIXTURES
    variables = {
        "ELMOC_ARCHIVE": str(elmoc_archive),
        "ELMOC_DIM": "12",
        "ELMOC_FASTTEXT": str(tiny_fasttext_path),
        "ELMOC_FASTTEXT_DIM": "16",
    }
    data = {
        "SNLI": ("snli_small_train.jsonl", "snli_small_dev.jsonl"),
        "SST": ("sst.txt", "sst.txt"),
        "NER": ("conll2003.txt", "conll2003.txt"),
        "SRL": ("srl_conll_2012", "srl_conll_2012/subdomain2"),
        "COREF": ("coref.gold_conll", "coref.gold_conll"),
        "POS": ("ud_pos.conllu", "ud_pos.conllu"),
    }
    for task, (train, validation) in data.items():
        variables[f"{task}_TRAIN_DATA_PATH"] = str(fixtures / train)
        variables[f"{task}_VALIDATION_DATA_PATH"] = str(fixtures / validation)
        variables[f"{task}_TEST_DATA_PATH"] = str(fixtures / validation)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return variables


# ---------------------------------------------------------------------- the tiny biLM downstream

SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["a", "dog"],
    [],
    ["unseenword", "zzqx", "the"],
]


def reference_layers(archive_path, sentences):
    """
    The biLM's layers computed the pretraining way: the archive's own reader wraps each sentence
    in <S> ... </S> tokens, the model's `contextual_layers` runs, and the boundaries are cut off.
    Returns a list of arrays of shape (num_layers, len(sentence), dim).
    """
    archive = load_archive(str(archive_path))
    model, reader = archive.model, archive.dataset_reader
    model.eval()
    instances = []
    for sentence in sentences:
        instance = reader.text_to_instance(sentence)
        reader.apply_token_indexers(instance)
        instances.append(instance)
    batch = Batch(instances)
    batch.index_instances(model.vocab)
    with torch.no_grad():
        layers, mask = model.contextual_layers(batch.as_tensor_dict()["tokens"])
    return [
        layers[:, index, 1 : len(sentence) + 1].numpy() for index, sentence in enumerate(sentences)
    ]


@pytest.fixture(scope="module")
def bilm(elmoc_archive):
    return ElmocBiLm(str(elmoc_archive))


@pytest.fixture(scope="module")
def indexer(elmoc_archive):
    return BilmArchiveIndexer.from_archive(str(elmoc_archive))


@pytest.fixture(scope="module")
def expected_layers(elmoc_archive):
    return reference_layers(elmoc_archive, SENTENCES)


def embed(module, indexer, sentences):
    return module(indexed_batch(indexer, sentences))
