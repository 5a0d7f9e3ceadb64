"""
Session fixtures for the downstream tests: a tiny ELMo-C biLM archive, pretrained for the test
session on the fixture corpus with the tiny fastText model of `tests/conftest.py`.
"""
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
import torch

from tests.conftest import FIXTURES_ROOT

DOWNSTREAM_FIXTURES = FIXTURES_ROOT / "downstream"
REPO_ROOT = Path(__file__).resolve().parents[2]
DOWNSTREAM_CONFIGS = REPO_ROOT / "training_configs" / "downstream"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """
    These tests run tiny tensors on shared 2-core machines, where a second intra-op thread only
    spins: one thread makes them several times faster.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def elmoc_archive(tiny_fasttext_path, tmp_path_factory) -> Path:
    """A tiny trained ELMo-C biLM: 16-d fastText input, 2 layers, projection 6 (output 12)."""
    from allennlp.commands.train import train_model_from_file
    from allennlp.common.util import import_module_and_submodules

    # What `--include-package elmoc_allennlp` registers.
    import_module_and_submodules("elmoc_allennlp")

    serialization_dir = tmp_path_factory.mktemp("elmoc_bilm") / "run"
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_model_from_file(
            str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
            str(serialization_dir),
            overrides=json.dumps({"trainer.num_epochs": 1}),
        )
    finally:
        torch.set_num_threads(previous)
    return serialization_dir / "model.tar.gz"


def rewrite_archive(
    source: Path, destination: Path, edit_config: Callable[[Dict[str, Any]], None]
) -> Path:
    """Copies a model archive, changing its config.json with `edit_config` (in place)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source, "r:gz") as original, tarfile.open(destination, "w:gz") as copy:
        for member in original:
            data = original.extractfile(member) if member.isfile() else None
            if member.name == "config.json":
                config = json.load(data)
                edit_config(config)
                encoded = json.dumps(config, indent=2).encode("utf-8")
                member.size = len(encoded)
                data = io.BytesIO(encoded)
            copy.addfile(member, data)
    return destination


@pytest.fixture(scope="session")
def relocated_archive(elmoc_archive, tiny_fasttext_path, tmp_path_factory) -> Path:
    """
    The tiny archive as if moved from another machine: its config points at fastText paths that
    do not exist here, and the .bin sits in a sibling folder, `<root>/fasttext/tiny.bin`, next to
    `<root>/bilm/model.tar.gz`.
    """
    root = tmp_path_factory.mktemp("moved")
    elsewhere = "/nonexistent/other_machine/fasttext/" + tiny_fasttext_path.name

    def point_elsewhere(config: Dict[str, Any]) -> None:
        config["dataset_reader"]["token_indexers"]["fasttext"]["vectors_path"] = elsewhere
        embedders = config["model"]["text_field_embedder"]["token_embedders"]
        embedders["fasttext"]["vectors_path"] = elsewhere

    (root / "fasttext").mkdir()
    shutil.copy(tiny_fasttext_path, root / "fasttext" / tiny_fasttext_path.name)
    return rewrite_archive(elmoc_archive, root / "bilm" / "model.tar.gz", point_elsewhere)


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
    }
    for task, (train, validation) in data.items():
        variables[f"{task}_TRAIN_DATA_PATH"] = str(fixtures / train)
        variables[f"{task}_VALIDATION_DATA_PATH"] = str(fixtures / validation)
        variables[f"{task}_TEST_DATA_PATH"] = str(fixtures / validation)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return variables

