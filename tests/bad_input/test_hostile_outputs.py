"""
Outputs a hostile (or careless) command line gives `elmoc-embed` and `elmoc-merge-bilm`: a folder
nobody may write, a path under `/proc`, the model archive or its fastText `.bin` given as the
output with `--force`, and a merge whose result fails its own check. Each must end in one
`ConfigurationError` naming the paths at fault, with every file that was there unchanged and no
output (or the earlier output, byte for byte) left.
"""

import errno
import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path
from typing import Dict

import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.commands.elmoc_embed import embed_file
from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives
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
        config["model"]["text_field_embedder"]["token_embedders"]["fasttext"]["vectors_path"] = str(
            vectors
        )

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
            str(archive),
            str(sentences),
            str(vectors),
            output="top",
            force=True,
            vectors_path=str(vectors) if vectors_given else None,
        )
    assert str(vectors) in str(raised.value)
    assert _digests(run) == before
    # A fastText model the archive reads through a hard link of another name is the same file.
    os.link(vectors, run / "vectors.hdf5")
    with pytest.raises(ConfigurationError, match="the fastText model"):
        embed_file(
            str(archive), str(sentences), str(run / "vectors.hdf5"), output="top", force=True
        )
    assert hashlib.sha256(vectors.read_bytes()).hexdigest() == before["vectors.bin"]


def test_force_still_replaces_an_earlier_output(own_copy, sentences):
    output = own_copy["run"] / "out.hdf5"
    output.write_bytes(b"an earlier export")
    embed_file(str(own_copy["archive"]), str(sentences), str(output), output="top", force=True)
    assert output.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"


# ---------------------------------------------------------------------- a merge that fails its check


@pytest.fixture
def direction_runs(elmoc_archive, tmp_path) -> Dict[str, Path]:
    """The tiny biLM as a forward-only and a backward-only run (its weights serve both)."""
    runs = {}
    for direction in ("forward", "backward"):

        def single(config, direction=direction):
            config["model"]["directions"] = direction

        runs[direction] = rewrite_archive(
            elmoc_archive, tmp_path / direction / "model.tar.gz", single
        )
    return runs


def _with_state(archive: Path, edit) -> None:
    """Rewrites `archive`'s weights.th in place with `edit(state)` applied."""
    with tarfile.open(archive, "r:gz") as original:
        members = [(m, original.extractfile(m).read() if m.isfile() else None) for m in original]
    for member, data in members:
        if member.name == "weights.th":
            state = torch.load(io.BytesIO(data))
            edit(state)
            buffer = io.BytesIO()
            torch.save(state, buffer)
            members[members.index((member, data))] = (member, buffer.getvalue())
            member.size = len(buffer.getvalue())
    with tarfile.open(archive, "w:gz") as copy:
        for member, data in members:
            copy.addfile(member, None if data is None else io.BytesIO(data))


BACKWARD_KEY = "_contextualizer.backward_layers.0.input_linearity.weight"


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("earlier_output", [False, True], ids=["new", "forced"])
def test_a_merge_of_non_finite_weights_names_the_parameter_and_leaves_nothing(
    direction_runs, tmp_path, value, earlier_output
):
    def poison(state):
        assert BACKWARD_KEY in state, sorted(state)
        state[BACKWARD_KEY][0, 0] = value

    _with_state(direction_runs["backward"], poison)
    output = tmp_path / "merged.tar.gz"
    if earlier_output:
        output.write_bytes(b"an earlier merge")
    before = _digests(tmp_path)
    with pytest.raises(ConfigurationError, match="non-finite") as raised:
        merge_bilm_archives(
            str(direction_runs["forward"]),
            str(direction_runs["backward"]),
            str(output),
            force=earlier_output,
        )
    assert BACKWARD_KEY in str(raised.value) and str(direction_runs["backward"]) in str(
        raised.value
    )
    assert "does not load as written" not in str(raised.value)
    assert _digests(tmp_path) == before


def test_a_merged_archive_that_does_not_load_is_not_left_at_the_output(direction_runs, tmp_path):
    # The same extra tensor in both runs: merged without complaint, refused by the model's load.
    def extra(state):
        state["_contextualizer.not_a_parameter"] = torch.ones(3)

    for archive in direction_runs.values():
        _with_state(archive, extra)
    output = tmp_path / "out" / "merged.tar.gz"
    output.parent.mkdir()
    output.write_bytes(b"an earlier merge")
    with pytest.raises(ConfigurationError, match="not_a_parameter") as raised:
        merge_bilm_archives(
            str(direction_runs["forward"]), str(direction_runs["backward"]), str(output), force=True
        )
    assert str(output) in str(raised.value) and "does not load" in str(raised.value)
    assert output.read_bytes() == b"an earlier merge"
    assert os.listdir(output.parent) == ["merged.tar.gz"]


def test_a_merge_never_replaces_one_of_its_inputs(direction_runs):
    forward = direction_runs["forward"]
    before = forward.read_bytes()
    with pytest.raises(ConfigurationError, match="is the forward archive") as raised:
        merge_bilm_archives(str(forward), str(direction_runs["backward"]), str(forward), force=True)
    assert str(forward) in str(raised.value)
    assert forward.read_bytes() == before


def test_a_sound_merge_is_verified_and_written(direction_runs, tmp_path):
    from allennlp.models.archival import load_archive

    output = merge_bilm_archives(
        str(direction_runs["forward"]),
        str(direction_runs["backward"]),
        str(tmp_path / "merged.tar.gz"),
    )
    merged = load_archive(output).model.state_dict()
    source = load_archive(direction_runs["forward"]).model.state_dict()
    assert all(torch.equal(merged[key], source[key]) for key in source)
    assert sorted(os.listdir(tmp_path)) == ["backward", "forward", "merged.tar.gz"]
