"""
What the tests of `elmoc_allennlp/common/archives/` share: members and archives built from the tiny
biLM archive (`write_archive`, `tests/bad_input/conftest.py`), its config and weights read back,
and a folder to extract into, removed with every extraction kept for the process.
"""

import io
import json
import tarfile
from pathlib import Path

import pytest

from elmoc_allennlp.common.archives import remove_extracted_archives
from tests.bad_input.conftest import write_archive


def _member(name: str, data: bytes = b"", kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _config(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile("config.json"))


def _weights(archive: Path) -> bytes:
    with tarfile.open(archive) as tar:
        return tar.extractfile("weights.th").read()


@pytest.fixture
def extraction(tmp_path):
    yield tmp_path / "extracted"
    remove_extracted_archives()


def _load(path: Path):
    from allennlp.models.archival import load_archive

    return load_archive(str(path))


def _with_model(elmoc_archive, tmp_path, name, edit) -> Path:
    config = _config(elmoc_archive)
    edit(config)
    return write_archive(elmoc_archive, tmp_path / f"{name}.tar.gz", [], config=config)


def _with_weights(elmoc_archive, path: Path, data: bytes) -> Path:
    return write_archive(elmoc_archive, path, [_member("weights.th", data)], drop=("weights.th",))
