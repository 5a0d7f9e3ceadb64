"""
An archive's vocabulary (`vocabulary.py`, issue #35 and the hostile round of #41): its lines and
bytes are bounded, its namespace files must be UTF-8, and a carried biLM's vocabulary gets the main
archive's checks; each refusal names the member.
"""

import json
import tarfile
from pathlib import Path

import pytest

from elmoc_allennlp.common.archives import UnsafeArchiveError, extract_archive
from tests.bad_input.conftest import write_archive
from tests.common.archives.conftest import _member


def test_vocabulary_lines_and_bytes_are_bounded(elmoc_archive, tmp_path, monkeypatch, extraction):
    path = write_archive(
        elmoc_archive, tmp_path / "lines.tar.gz", [_member("vocabulary/tokens.txt", b"a\n" * 2000)]
    )
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_VOCABULARY_LINES", "1000")
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "vocabulary/tokens.txt"
    assert "ELMOC_ARCHIVE_MAX_VOCABULARY_LINES" in str(raised.value)
    assert not extraction.exists()
    monkeypatch.delenv("ELMOC_ARCHIVE_MAX_VOCABULARY_LINES")
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES", "3000")
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert "ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES" in str(raised.value)


def test_a_namespace_file_not_utf8_is_refused_by_line(elmoc_archive, tmp_path, extraction):
    latin1 = "ok\ncaf\u00e9\n".encode("latin-1")
    path = write_archive(
        elmoc_archive, tmp_path / "latin1.tar.gz", [_member("vocabulary/labels.txt", latin1)]
    )
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "vocabulary/labels.txt"
    assert "line 2" in str(raised.value)


def test_a_folder_where_vocabulary_lock_should_be_is_refused(elmoc_archive, tmp_path, extraction):
    path = write_archive(
        elmoc_archive,
        tmp_path / "lock.tar.gz",
        [_member("vocabulary/.lock", kind=tarfile.DIRTYPE)],
        drop=("vocabulary/.lock",),
    )
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "vocabulary/.lock"


def _carried_bilm(vocabulary: list) -> list:
    """Members of a biLM copy carried in `elmoc_bilm/`: a config that builds nothing, and
    `vocabulary` (member name under the copy's folder, kind)."""
    config = {"model": {"type": "elmoc_bilm"}, "dataset_reader": {"type": "elmoc_lm_corpus"}}
    folder = "elmoc_bilm/0123456789abcdef/"
    return [_member(folder + "config.json", json.dumps(config).encode())] + [
        _member(folder + name, b"x\n" if kind == tarfile.REGTYPE else b"", kind)
        for name, kind in vocabulary
    ]


@pytest.mark.parametrize(
    "vocabulary, named",
    [
        # A folder where the copy's vocabulary/.lock should be (was a bare IsADirectoryError).
        (
            [
                ("vocabulary/non_padded_namespaces.txt", tarfile.REGTYPE),
                ("vocabulary/.lock", tarfile.DIRTYPE),
            ],
            "elmoc_bilm/0123456789abcdef/vocabulary/.lock",
        ),
        # No vocabulary at all, or without the file allennlp opens first (was a FileNotFoundError
        # naming temporary paths).
        ([], "elmoc_bilm/0123456789abcdef/vocabulary/"),
        ([("vocabulary/tokens.txt", tarfile.REGTYPE)], "elmoc_bilm/0123456789abcdef/vocabulary/"),
    ],
)
def test_a_carried_biLM_vocabulary_gets_the_main_archives_checks(
    elmoc_archive, tmp_path, extraction, vocabulary, named
):
    path = write_archive(elmoc_archive, tmp_path / "carried.tar.gz", _carried_bilm(vocabulary))
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.archive == str(path) and raised.value.member == named
    assert not extraction.exists()


def test_a_sound_carried_biLM_vocabulary_extracts(elmoc_archive, tmp_path, extraction):
    members = [
        ("vocabulary/non_padded_namespaces.txt", tarfile.REGTYPE),
        ("vocabulary/tokens.txt", tarfile.REGTYPE),
    ]
    path = write_archive(elmoc_archive, tmp_path / "carried.tar.gz", _carried_bilm(members))
    directory = Path(extract_archive(path, extraction))
    assert (directory / "elmoc_bilm/0123456789abcdef/vocabulary/tokens.txt").read_bytes() == b"x\n"
