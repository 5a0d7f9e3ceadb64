"""
The fine-tuning runs the tests of `elmoc_allennlp/finetune/` share: a tiny biLM pretrained for one
epoch, fine-tuned with `training_configs/pretrain/finetune_domain.jsonnet`, and another fastText model.
"""
import json
import shutil
from pathlib import Path
from typing import Dict

import pytest

from allennlp.commands.train import train_model_from_file
from allennlp.common.util import import_module_and_submodules

from elmoc_allennlp.fasttext.training import train_fasttext
from tests.conftest import FIXTURES_ROOT, LM_CORPUS, TINY_FASTTEXT_OPTIONS

REPO_ROOT = Path(__file__).resolve().parents[2]
FINETUNE_CONFIG = REPO_ROOT / "training_configs" / "pretrain" / "finetune_domain.jsonnet"

import_module_and_submodules("elmoc_allennlp")


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every fine-tuning test at one intra-op thread (tests/conftest.py says why)."""


@pytest.fixture(scope="session")
def base_archive(tiny_fasttext_path, tmp_path_factory) -> Path:
    """A tiny biLM pretrained for one epoch on the fixture corpus."""
    serialization_dir = tmp_path_factory.mktemp("base_bilm") / "run"
    train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(serialization_dir),
        overrides=json.dumps({"trainer.num_epochs": 1}),
    )
    return serialization_dir / "model.tar.gz"


def finetune(
    archive: Path, serialization_dir: Path, monkeypatch, overrides: Dict = None
) -> Path:
    monkeypatch.setenv("ELMOC_ARCHIVE", str(archive))
    monkeypatch.setenv("ELMOC_TRAIN_DATA", str(LM_CORPUS / "train-*.txt"))
    monkeypatch.setenv("ELMOC_VALIDATION_DATA", str(LM_CORPUS / "valid.txt"))
    settings = {"data_loader.batch_sampler.batch_size": 8}
    settings.update(overrides or {})
    train_model_from_file(str(FINETUNE_CONFIG), str(serialization_dir), json.dumps(settings))
    return serialization_dir / "model.tar.gz"


@pytest.fixture(scope="session")
def finetuned(base_archive, tmp_path_factory):
    """
    Four epochs (one per layer group) from a copy of the base archive, keeping every epoch's
    checkpoint; the copy is deleted afterwards, so the result must not need it.
    """
    monkeypatch = pytest.MonkeyPatch()
    copy_dir = tmp_path_factory.mktemp("base_copy")
    base_copy = Path(shutil.copy(base_archive, copy_dir / "model.tar.gz"))
    serialization_dir = tmp_path_factory.mktemp("finetuned") / "run"
    try:
        archive = finetune(
            base_copy,
            serialization_dir,
            monkeypatch,
            {"trainer.num_epochs": 4, "trainer.checkpointer.keep_most_recent_by_count": None},
        )
    finally:
        monkeypatch.undo()
    shutil.rmtree(copy_dir)
    return archive, serialization_dir



@pytest.fixture(scope="session")
def other_fasttext(tmp_path_factory) -> Path:
    """Another fastText model of the same dimension (trained differently)."""
    directory = tmp_path_factory.mktemp("other_fasttext")
    corpus = directory / "corpus.txt"
    corpus.write_text(
        "".join(path.read_text() for path in sorted(LM_CORPUS.glob("*.txt"))), encoding="utf-8"
    )
    options = dict(TINY_FASTTEXT_OPTIONS, epoch=2, minn=3)
    return train_fasttext(corpus, directory / "other.bin", **options)
