"""
The fine-tuning runs the tests of `elmoc_allennlp/finetune/` share: the session's tiny biLM (pretrained
for one epoch), fine-tuned with `training_configs/pretrain/finetune_domain.jsonnet`, and another
fastText model, each built once per run.
"""

import json
import shutil
from pathlib import Path
from typing import Dict

import pytest

from allennlp.commands.train import train_model_from_file
from allennlp.common.util import import_module_and_submodules

from tests.conftest import LM_CORPUS, shared_build, train_tiny_fasttext

REPO_ROOT = Path(__file__).resolve().parents[2]
FINETUNE_CONFIG = REPO_ROOT / "training_configs" / "pretrain" / "finetune_domain.jsonnet"

import_module_and_submodules("elmoc_allennlp")


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every fine-tuning test at one intra-op thread (tests/conftest.py says why)."""


@pytest.fixture(scope="session")
def base_archive(elmoc_archive) -> Path:
    """
    A tiny biLM pretrained for one epoch on the fixture corpus: the session's `elmoc_archive`
    (tests/conftest.py), which is exactly that; the fine-tuning run reads a copy of it.
    """
    return elmoc_archive


def finetune(archive: Path, serialization_dir: Path, monkeypatch, overrides: Dict = None) -> Path:
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
    checkpoint; the copy is deleted afterwards, so the result must not need it. Built once per
    run, for every pytest-xdist worker (`shared_build`).
    """

    def build(folder: Path) -> None:
        monkeypatch = pytest.MonkeyPatch()
        copy_dir = folder / "base_copy"
        copy_dir.mkdir()
        base_copy = Path(shutil.copy(base_archive, copy_dir / "model.tar.gz"))
        try:
            finetune(
                base_copy,
                folder / "run",
                monkeypatch,
                {"trainer.num_epochs": 4, "trainer.checkpointer.keep_most_recent_by_count": None},
            )
        finally:
            monkeypatch.undo()
        shutil.rmtree(copy_dir)

    serialization_dir = (
        shared_build(tmp_path_factory, "finetuned", build, str(base_archive)) / "run"
    )
    return serialization_dir / "model.tar.gz", serialization_dir


@pytest.fixture(scope="session")
def other_fasttext(tmp_path_factory) -> Path:
    """Another fastText model of the same dimension (trained differently)."""
    options = dict(epoch=2, minn=3)
    folder = shared_build(
        tmp_path_factory,
        "other_fasttext",
        lambda directory: train_tiny_fasttext(directory, "other.bin", **options),
        options,
    )
    return folder / "other.bin"
