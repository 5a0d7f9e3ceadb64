"""
A biLM trained with a relative fastText path (`ELMOC_FASTTEXT=ptb.bin`, as the pretraining configs'
headers say) loads from any working directory on the machine that trained it: its archive records
where the `.bin` really was and its fingerprint (`elmoc_fasttext.json`); elsewhere the `.bin` beside
the archive is found as before.
"""

import json
import os
import shutil
import tarfile

import numpy
import pytest

from allennlp.models.archival import load_archive

from elmoc_allennlp.fasttext.location import LOCATIONS_NAME
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
from tests.conftest import FIXTURES_ROOT

SENTENCE = ["the", "cat", "sat"]


@pytest.fixture(scope="module")
def relative_run(tiny_fasttext_path, tmp_path_factory):
    """
    `(training folder, archive, vectors)`: trained in `training/` into `runs/elmoc` with
    `vectors_path` `ptb.bin`.
    """
    from allennlp.commands.train import train_model_from_file
    from allennlp.common.util import import_module_and_submodules

    import_module_and_submodules("elmoc_allennlp")
    training = tmp_path_factory.mktemp("training")
    shutil.copy(tiny_fasttext_path, training / "ptb.bin")
    previous, variable = os.getcwd(), os.environ["ELMOC_TEST_FASTTEXT"]
    os.chdir(training)
    os.environ["ELMOC_TEST_FASTTEXT"] = "ptb.bin"
    try:
        train_model_from_file(
            str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
            "runs/elmoc",
            overrides=json.dumps({"trainer.num_epochs": 1}),
        )
        in_place = ElmocEmbedder("runs/elmoc/model.tar.gz").embed_sentence(SENTENCE)
    finally:
        os.chdir(previous)
        os.environ["ELMOC_TEST_FASTTEXT"] = variable
    return training, training / "runs" / "elmoc" / "model.tar.gz", in_place


def test_the_archive_records_where_the_bin_really_is(relative_run):
    training, archive, _ = relative_run
    with tarfile.open(archive) as tar:
        config = json.load(tar.extractfile("config.json"))
        locations = json.load(tar.extractfile(LOCATIONS_NAME))
    assert config["dataset_reader"]["token_indexers"]["fasttext"]["vectors_path"] == "ptb.bin"
    vectors = FastTextVectors.from_path(training / "ptb.bin")
    assert locations["ptb.bin"] == {
        "path": str((training / "ptb.bin").resolve()),
        "fingerprint": vectors.fingerprint,
    }


def test_it_loads_from_another_working_directory(relative_run, tmp_path, monkeypatch):
    training, archive, in_place = relative_run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    numpy.testing.assert_allclose(
        ElmocEmbedder(str(archive)).embed_sentence(SENTENCE), in_place, rtol=1e-5, atol=1e-6
    )
    # allennlp's own loader (evaluate, predict) finds it too.
    embedder = load_archive(str(archive)).model._text_field_embedder._token_embedders["fasttext"]
    assert embedder.vectors.path == (training / "ptb.bin").resolve()


def test_a_different_file_of_that_name_in_the_working_directory_is_not_taken(
    relative_run, tmp_path, monkeypatch
):
    training, archive, in_place = relative_run
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ptb.bin").write_bytes(b"not the vectors the biLM was trained with")
    numpy.testing.assert_allclose(
        ElmocEmbedder(str(archive)).embed_sentence(SENTENCE), in_place, rtol=1e-5, atol=1e-6
    )


def test_moved_with_its_bin_it_loads_as_before(relative_run, tmp_path, monkeypatch):
    training, archive, in_place = relative_run
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(archive, moved / "model.tar.gz")
    shutil.copy(training / "ptb.bin", moved / "ptb.bin")
    (training / "ptb.bin").rename(training / "gone.bin")  # as on another machine
    try:
        monkeypatch.chdir(tmp_path)
        embedded = ElmocEmbedder(str(moved / "model.tar.gz")).embed_sentence(SENTENCE)
    finally:
        (training / "gone.bin").rename(training / "ptb.bin")
    numpy.testing.assert_allclose(embedded, in_place, rtol=1e-5, atol=1e-6)
