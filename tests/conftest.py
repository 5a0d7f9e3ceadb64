"""Session-wide test fixtures: a tiny fastText model trained on the fixture corpus, and a tiny
ELMo-C biLM archive pretrained with it (for the tests of everything that takes an archive).

Test configs refer to it as `std.extVar("ELMOC_TEST_FASTTEXT")` and to the fixtures folder as
`std.extVar("ELMOC_TEST_FIXTURES")`; allennlp's `Params.from_file` reads ext vars from the
environment, so both are exported once for the whole session.

`ELMOC_TEST_THREADS=N` runs the suite with N intra-op threads (`torch.set_num_threads`, and
`OMP_NUM_THREADS` for the processes tests start); unset, PyTorch's default. Results that depend on
how BLAS splits work across threads show up when the suite is run at 1 and at 2 threads.
"""
import io
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
import torch

from elmoc_allennlp.common import torch_versions

FIXTURES_ROOT = Path(__file__).parent / "fixtures"
LM_CORPUS = FIXTURES_ROOT / "lm_corpus"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

THREADS_VARIABLE = "ELMOC_TEST_THREADS"



def _requested_threads() -> int:
    value = os.environ.get(THREADS_VARIABLE, "")
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise pytest.UsageError(f"{THREADS_VARIABLE} must be a positive integer, got {value!r}")
    return threads


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "needs_meta_device: builds modules on the meta device")
    if os.environ.get(THREADS_VARIABLE):
        threads = _requested_threads()
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def pytest_collection_modifyitems(config, items) -> None:
    """
    The published environment's torch 1.12 cannot build modules on the meta device (the plugin
    refuses it there: tests/common/test_torch_versions.py); the paper-size parameter counts that
    need it are checked in the modern environment.
    """
    if torch_versions.TORCH_VERSION < (2, 0):
        skip = pytest.mark.skip(reason="the meta device needs torch >= 2.0")
        for item in items:
            if "needs_meta_device" in item.keywords:
                item.add_marker(skip)


def pytest_report_header(config) -> str:
    import platform

    source = THREADS_VARIABLE if os.environ.get(THREADS_VARIABLE) else "PyTorch's default"
    environment = "published" if torch_versions.TORCH_VERSION < (2, 0) else "modern"
    return (
        f"environment: {environment} (CPython {platform.python_version()}, torch {torch.__version__}), "
        f"{torch.get_num_threads()} intra-op threads ({source})"
    )


TINY_FASTTEXT_OPTIONS = dict(dim=16, min_count=1, minn=2, maxn=4, bucket=20000, epoch=5, thread=10)


@pytest.fixture(scope="session", autouse=True)
def tiny_fasttext_path(tmp_path_factory) -> Path:
    from elmoc_allennlp.fasttext.training import train_fasttext

    directory = tmp_path_factory.mktemp("fasttext")
    corpus = directory / "corpus.txt"
    corpus.write_text(
        "".join(path.read_text() for path in sorted(LM_CORPUS.glob("*.txt"))), encoding="utf-8"
    )
    path = train_fasttext(corpus, directory / "tiny.bin", **TINY_FASTTEXT_OPTIONS)
    os.environ["ELMOC_TEST_FASTTEXT"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def fixtures_root_environment() -> Path:
    """Exported as ELMOC_TEST_FIXTURES so test configs use absolute data paths."""
    os.environ["ELMOC_TEST_FIXTURES"] = str(FIXTURES_ROOT)
    return FIXTURES_ROOT


@pytest.fixture
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
