"""
Fixtures for the downstream configs: the environment they read, pointing at tiny task data and
the tiny biLM archive of `tests/conftest.py`.
"""
from pathlib import Path
from typing import Dict

import pytest

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

