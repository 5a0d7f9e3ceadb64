"""
A plugin serialization folder read as a model archive (`allennlp evaluate runs/elmoc`, a biLM's
`archive_file` given as its run's folder) is checked as an extracted `.tar.gz` is, before allennlp
reads its weights: torch 1.12 unpickles a weights file whole, so a folder from a stranger could
run code (issue #51's session found it open; `.tar.gz` archives were already checked).
"""

import os
import pickle
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmoc_allennlp.common.archives import UnsafeArchiveError
from elmoc_allennlp.downstream.embedder import ElmocEmbedder


@pytest.fixture
def run_folder(elmoc_archive, tmp_path) -> Path:
    """The tiny biLM as its `allennlp train` folder: config, vocabulary and `best.th`."""
    folder = tmp_path / "run"
    with tarfile.open(elmoc_archive) as tar:
        tar.extractall(folder)  # the suite's own archive
    (folder / "weights.th").rename(folder / "best.th")
    return folder


def _payload(marker: Path) -> bytes:
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return pickle.dumps({"weight": Payload()})


@pytest.mark.parametrize("name", ["weights.th", "best.th"])
def test_a_pickle_in_a_folders_weights_runs_nothing(run_folder, tmp_path, name):
    """The file allennlp would load (`weights.th`, else `best.th`) is refused from its header, by
    `load_archive` and by the biLM's own loading, naming the folder and the file."""
    marker = tmp_path / "ran"
    (run_folder / name).write_bytes(_payload(marker))
    for load in (lambda: load_archive(str(run_folder)), lambda: ElmocEmbedder(str(run_folder))):
        with pytest.raises(
            UnsafeArchiveError, match=f"model folder {run_folder}: its file '{name}'"
        ):
            load()
        assert not marker.exists()


def test_a_checked_folder_loads_as_its_archive_does(run_folder, elmoc_archive):
    folder = load_archive(str(run_folder)).model.state_dict()
    archive = load_archive(str(elmoc_archive)).model.state_dict()
    assert folder.keys() == archive.keys()
    assert all(torch.equal(folder[key], archive[key]) for key in folder)


def test_a_folder_whose_weights_cannot_fill_its_config_is_refused(run_folder, tmp_path):
    torch.save({"weight": torch.zeros(3)}, run_folder / "best.th")
    with pytest.raises(ConfigurationError, match="its configs imply at least"):
        load_archive(str(run_folder))


def test_a_folder_without_weights_is_refused_naming_what_it_lacks(run_folder):
    (run_folder / "best.th").unlink()
    with pytest.raises(ConfigurationError, match="has no best.th"):
        load_archive(str(run_folder))
    shutil.rmtree(run_folder / "vocabulary")
    torch.save({}, run_folder / "best.th")
    with pytest.raises(ConfigurationError, match="has no vocabulary"):
        load_archive(str(run_folder))
