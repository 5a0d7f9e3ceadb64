"""
Fixtures of the bad-input suite: the tiny trained biLM archive of `tests/conftest.py`, and the
crafted archives made from it once per session.
"""

import io
import json
import tarfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import pytest

# A name no real file has: any file of this name found after a case was written by an archive.
ESCAPE_NAME = "elmoc-escaped-from-archive.txt"


def _file(name: str, data: bytes = b"planted\n", kind: bytes = tarfile.REGTYPE, link: str = ""):
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = link
    member.mode = 0o644
    if kind == tarfile.REGTYPE:
        member.size = len(data)
        return member, io.BytesIO(data)
    return member, None


def write_archive(
    source: Path,
    destination: Path,
    extra: List,
    first: bool = False,
    config: Optional[Union[Dict, bytes]] = None,
    drop: Sequence[str] = (),
) -> Path:
    """A copy of the model archive `source` with the `extra` members (before or after its own),
    without the members `drop`, and `config.json` replaced by `config` (a dict, or its bytes)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source, "r:gz") as original, tarfile.open(destination, "w:gz") as copy:
        own = []
        for member in original:
            if member.name in drop:
                continue
            data = original.extractfile(member).read() if member.isfile() else None
            if member.name == "config.json" and config is not None:
                data = config if isinstance(config, bytes) else json.dumps(config).encode("utf-8")
                member.size = len(data)
            own.append((member, None if data is None else io.BytesIO(data)))
        for member, data in (extra + own) if first else (own + extra):
            copy.addfile(member, data)
    return destination


def _sparse(name: str):
    """A GNU sparse member (old format): 64 GiB on disk once extracted, a few bytes stored."""
    member = tarfile.TarInfo(name)
    member.type = tarfile.GNUTYPE_SPARSE
    member.sparse = [(0, 0)]
    member.size = 0
    member.mode = 0o644
    return member, io.BytesIO(b"")


@pytest.fixture(scope="session")
def outside(tmp_path_factory) -> Path:
    """Where the absolute members and links of the crafted archives point: must stay empty."""
    return tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="session")
def crafted(elmoc_archive, outside, tmp_path_factory) -> Dict[str, Path]:
    """
    The tiny biLM archive with one kind of planted member each (name -> archive path). Relative
    escapes climb two folders: from `<sandbox>/tmp/tmpXXXX` (the extraction folder of a case)
    to the case's sandbox.
    """
    root = tmp_path_factory.mktemp("crafted")
    climb = "../../" + ESCAPE_NAME
    absolute = str(outside / ESCAPE_NAME)
    kinds = {
        "absolute-name": [_file(absolute)],
        "dotdot-name": [_file(climb)],
        "dotdot-inside-name": [_file("vocabulary/../../../" + ESCAPE_NAME)],
        "symlink-to-absolute-folder": [_file("out", kind=tarfile.SYMTYPE, link=str(outside))],
        "symlink-then-file-through-it": [
            _file("out", kind=tarfile.SYMTYPE, link=str(outside)),
            _file("out/" + ESCAPE_NAME),
        ],
        "symlink-climbing-out": [_file("up", kind=tarfile.SYMTYPE, link="../..")],
        "symlink-chain-out": [
            _file("here", kind=tarfile.SYMTYPE, link="."),
            _file("parent", kind=tarfile.SYMTYPE, link="here/.."),
        ],
        "file-through-inner-symlink": [
            _file("here", kind=tarfile.SYMTYPE, link="vocabulary"),
            _file("here/" + ESCAPE_NAME),
        ],
        "symlink-replacing-config": [_file("config.json", kind=tarfile.SYMTYPE, link="meta.json")],
        "hardlink-to-absolute": [_file("weights2.th", kind=tarfile.LNKTYPE, link="/etc/passwd")],
        "hardlink-climbing-out": [_file("h", kind=tarfile.LNKTYPE, link=climb)],
        "hardlink-to-symlink": [
            _file("inner", kind=tarfile.SYMTYPE, link="vocabulary"),
            _file("h", kind=tarfile.LNKTYPE, link="inner"),
        ],
        "character-device": [_file("tty", kind=tarfile.CHRTYPE)],
        "block-device": [_file("disk", kind=tarfile.BLKTYPE)],
        "fifo": [_file("pipe", kind=tarfile.FIFOTYPE)],
        "duplicate-config": [_file("config.json", b'{"model": {"type": "basic_classifier"}}')],
        "config-is-a-folder": [_file("config.json", kind=tarfile.DIRTYPE)],
        "file-inside-config": [_file("config.json/" + ESCAPE_NAME)],
        "inner-link-to-a-sibling": [
            _file("notes.txt"),
            _file("link", kind=tarfile.SYMTYPE, link="notes.txt"),
        ],
        "inner-hard-link": [
            _file("notes.txt"),
            _file("hard", kind=tarfile.LNKTYPE, link="notes.txt"),
        ],
        "sparse-config": [_sparse("config.json")],
    }
    archives = {}
    for name, extra in kinds.items():
        archives[name] = write_archive(elmoc_archive, root / name / "model.tar.gz", extra)
    # The planted member first: nothing of the archive may be written before it is refused.
    archives["dotdot-name-first"] = write_archive(
        elmoc_archive, root / "dotdot-name-first" / "model.tar.gz", [_file(climb)], first=True
    )
    return archives
