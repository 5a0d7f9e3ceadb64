"""
Outputs a hostile (or careless) command line gives `elmoc-embed` and `elmoc-merge-bilm`: a folder
nobody may write, a path under `/proc`, the model archive or its fastText `.bin` given as the
output with `--force`, and a merge whose result fails its own check. Each must end in one
`ConfigurationError` naming the paths at fault, with every file that was there unchanged and no
output (or the earlier output, byte for byte) left.
"""
import errno
import hashlib
import os
import shutil
from pathlib import Path
from typing import Dict

import pytest

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.commands.elmoc_embed import embed_file
from elmoc_allennlp.common import writer_lock
from tests.conftest import rewrite_archive

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _digests(folder: Path) -> Dict[str, str]:
    """Every file under `folder` (hidden ones included) by relative path, with its SHA-256."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def sentences(tmp_path) -> Path:
    path = tmp_path / "input" / "sentences.txt"
    path.parent.mkdir()
    path.write_text("the cat sat\na dog\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------- an output nobody may write


def test_an_output_under_proc_is_named_before_any_lock_file(elmoc_archive, sentences):
    output = "/proc/elmoc-embed-output.hdf5"
    with pytest.raises(ConfigurationError) as raised:
        embed_file(str(elmoc_archive), str(sentences), output, output="top", force=True)
    assert output in str(raised.value) and "not writable" in str(raised.value)
    assert not os.path.exists(output) and not os.path.exists("/proc/.elmoc-embed-output.hdf5.lock")


def test_an_output_in_a_read_only_folder_is_named(elmoc_archive, sentences, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write anywhere")
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "kept.txt").write_text("kept\n")
    folder.chmod(0o555)
    try:
        with pytest.raises(ConfigurationError, match="not writable") as raised:
            embed_file(str(elmoc_archive), str(sentences), str(folder / "out.hdf5"), output="top")
        assert str(folder / "out.hdf5") in str(raised.value)
        assert sorted(os.listdir(folder)) == ["kept.txt"]
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOENT, errno.EACCES], ids=errno.errorcode.get)
def test_a_lock_file_that_cannot_be_created_names_the_output(
    elmoc_archive, sentences, tmp_path, monkeypatch, code
):
    # A folder that passes the access check but refuses the lock file: a read-only file system
    # that `access` does not see (an overlay, a FUSE mount), /proc for root, a folder removed.
    original = os.open

    def refusing(path, *args, **kwargs):
        if os.fspath(path).endswith(".lock"):
            raise OSError(code, os.strerror(code), path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(writer_lock.os, "open", refusing)
    output = tmp_path / "out.hdf5"
    with pytest.raises(ConfigurationError) as raised:
        embed_file(str(elmoc_archive), str(sentences), str(output), output="top")
    message = str(raised.value)
    assert str(output) in message and f".{output.name}.lock" in message
    assert os.strerror(code) in message
    assert sorted(os.listdir(tmp_path)) == ["input"]


# ---------------------------------------------------------------------- --force and the run's own files


@pytest.fixture
def own_copy(elmoc_archive, tiny_fasttext_path, tmp_path) -> Dict[str, Path]:
    """The tiny archive and its fastText `.bin`, copied into `tmp_path/run`, the archive pointing there."""
    run = tmp_path / "run"
    run.mkdir()
    vectors = run / "vectors.bin"
    shutil.copy(tiny_fasttext_path, vectors)

    def point_here(config):
        config["dataset_reader"]["token_indexers"]["fasttext"]["vectors_path"] = str(vectors)
        config["model"]["text_field_embedder"]["token_embedders"]["fasttext"]["vectors_path"] = str(vectors)

    archive = rewrite_archive(elmoc_archive, run / "model.tar.gz", point_here)
    return {"run": run, "archive": archive, "vectors": vectors}


@pytest.mark.parametrize("given_as", ["path", "hard_link", "symbolic_link"])
def test_force_never_replaces_the_model_archive(own_copy, sentences, given_as):
    run, archive = own_copy["run"], own_copy["archive"]
    output = archive
    if given_as == "hard_link":
        output = run / "linked.hdf5"
        os.link(archive, output)
    elif given_as == "symbolic_link":
        output = run / "pointing.hdf5"
        output.symlink_to(archive)
    before = _digests(run)
    with pytest.raises(ConfigurationError, match="the model archive") as raised:
        embed_file(str(archive), str(sentences), str(output), output="top", force=True)
    assert str(output) in str(raised.value) and str(archive) in str(raised.value)
    assert _digests(run) == before
    assert not [name for name in os.listdir(run) if ".partial-" in name or name.endswith(".lock")]


@pytest.mark.parametrize("vectors_given", [False, True], ids=["from_the_archive", "vectors_path"])
def test_force_never_replaces_the_fasttext_model(own_copy, sentences, vectors_given):
    run, archive, vectors = own_copy["run"], own_copy["archive"], own_copy["vectors"]
    before = _digests(run)
    with pytest.raises(ConfigurationError, match="the fastText model") as raised:
        embed_file(
            str(archive), str(sentences), str(vectors), output="top", force=True,
            vectors_path=str(vectors) if vectors_given else None,
        )
    assert str(vectors) in str(raised.value)
    assert _digests(run) == before
    # A fastText model the archive reads through a hard link of another name is the same file.
    os.link(vectors, run / "vectors.hdf5")
    with pytest.raises(ConfigurationError, match="the fastText model"):
        embed_file(str(archive), str(sentences), str(run / "vectors.hdf5"), output="top", force=True)
    assert hashlib.sha256(vectors.read_bytes()).hexdigest() == before["vectors.bin"]


def test_force_still_replaces_an_earlier_output(own_copy, sentences):
    output = own_copy["run"] / "out.hdf5"
    output.write_bytes(b"an earlier export")
    embed_file(str(own_copy["archive"]), str(sentences), str(output), output="top", force=True)
    assert output.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
