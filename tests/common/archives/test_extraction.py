"""
Extraction (`extraction.py`, issue #35): member names, depth and folder count are bounded before
anything is written, a full disk names the archive and the member, and small bombs are refused in
bounded memory; nothing is left extracted.
"""

import errno
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from elmoc_allennlp.common.archives import UnsafeArchiveError, extract_archive
from elmoc_allennlp.common.disk_full import DiskFullError
from tests.bad_input.conftest import write_archive
from tests.common.archives.conftest import _member
from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("components", [900, 1000])
def test_deep_member_names_are_refused_before_any_folder(
    elmoc_archive, tmp_path, extraction, components
):
    name = "/".join(["d"] * components) + "/f"
    path = write_archive(elmoc_archive, tmp_path / "deep.tar.gz", [_member(name, b"x")], first=True)
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert "ELMOC_ARCHIVE_MAX_DEPTH" in str(raised.value)
    assert raised.value.member == name[:200]
    assert not extraction.exists()


def test_folder_count_is_bounded(elmoc_archive, tmp_path, monkeypatch, extraction):
    extra = [_member(f"notes/{index}/f", b"x") for index in range(60)]
    path = write_archive(elmoc_archive, tmp_path / "folders.tar.gz", extra)
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_FOLDERS", "50")
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert "ELMOC_ARCHIVE_MAX_FOLDERS" in str(raised.value)
    assert raised.value.member.startswith("notes/")


def test_a_300_character_member_name_is_refused_by_name(elmoc_archive, tmp_path, extraction):
    name = "notes/" + "n" * 300
    path = write_archive(elmoc_archive, tmp_path / "long.tar.gz", [_member(name, b"x")])
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == name


def test_a_full_disk_during_extraction_names_archive_and_member(
    elmoc_archive, tmp_path, monkeypatch, extraction
):
    import elmoc_allennlp.common.archives.extraction as archives

    def full(source, out, length=0):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(archives.shutil, "copyfileobj", full)
    with pytest.raises(DiskFullError) as raised:
        extract_archive(elmoc_archive, extraction)
    assert raised.value.errno == errno.ENOSPC
    assert str(elmoc_archive) in str(raised.value) and "'config.json'" in str(raised.value)
    assert not extraction.exists()


# ---------------------------------------------------------------------- memory to refuse


class _Repeated(io.RawIOBase):
    """`unit` x `times`, read in chunks: the bombs are built without holding them."""

    def __init__(self, unit: bytes, times: int) -> None:
        self.unit, self.left = unit, len(unit) * times

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self.left) // len(self.unit) * len(self.unit) or min(
            len(buffer), self.left
        )
        buffer[:count] = (self.unit * (count // len(self.unit) + 1))[:count]
        self.left -= count
        return count


def _repeated_member(name: str, unit: bytes, times: int = 1):
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(unit) * times, 0o644
    return info, io.BufferedReader(_Repeated(unit, times), 1 << 20)


def _bombs(elmoc_archive: Path, root: Path) -> dict:
    deflated = io.BytesIO()
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as weights:
        weights.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        with weights.open("archive/data/0", "w", force_zip64=True) as record:
            for _ in range(128):
                record.write(bytes(1 << 20))
    deflated_member = _member("weights.th", deflated.getvalue())
    return {
        "lines": write_archive(
            elmoc_archive,
            root / "lines.tar.gz",
            [_repeated_member("vocabulary/tokens.txt", b"a\n", 5_000_000)],
        ),
        "folders": write_archive(
            elmoc_archive, root / "folders.tar.gz", [_member("/".join(["d"] * 900) + "/f", b"x")]
        ),
        "deflated": write_archive(
            elmoc_archive, root / "deflated.tar.gz", [deflated_member], drop=("weights.th",)
        ),
    }


_EXTRACT = r"""
import json, os, resource, sys
from elmoc_allennlp.common.archives import extract_archive
bombs = json.loads(sys.argv[1])
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
try:  # Linux: restart the peak (VmHWM) here, past the imports' transient peak
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    start, peak_key = status("VmRSS"), "VmHWM"
except OSError:
    start, peak_key = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, None
refused = {}
for name, path in bombs.items():
    try:
        extract_archive(path, path + ".extracted")
    except Exception as error:
        refused[name] = [type(error).__name__, os.path.getsize(path), os.path.exists(path + ".extracted")]
peak = status(peak_key) if peak_key else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"refused": refused, "before_kb": start, "maxrss_kb": peak}))
"""


def test_small_bombs_are_refused_in_bounded_memory(elmoc_archive, tmp_path):
    """
    Small archives that expand hugely (lines, folders, a deflated member) are refused cheaply.

    Slow (~5 s): the bombs are written here (a 5-million-line member, 128 MB deflated) and
    extracted in a fresh process (`tests/fresh_process.py`), because the bound is that process's
    peak resident memory, measured apart from this one's.
    """
    bombs = {name: str(path) for name, path in _bombs(elmoc_archive, tmp_path).items()}
    result = run_python(
        ["-c", _EXTRACT, json.dumps(bombs)],
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert set(report["refused"]) == set(bombs), report
    for name, (kind, size, extracted) in report["refused"].items():
        assert kind == "UnsafeArchiveError" and not extracted, (name, kind)
        assert size < 100_000, (name, size)
    # Refusing them all costs a few MB past the interpreter with torch and allennlp imported.
    assert report["maxrss_kb"] - report["before_kb"] < 200_000, report
