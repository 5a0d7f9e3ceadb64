"""
`--recover` checks the training state's values, not only its keys, and `archives/marks.json`
is read with errors naming it (issue #35, section 4).
"""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.training.archive_at_marks import ArchiveAtMarksCallback
from tests.conftest import FIXTURES_ROOT


def _train(folder: Path, epochs: int, recover: bool = False):
    from allennlp.commands.train import train_model_from_file

    train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(folder),
        overrides=json.dumps({"trainer.num_epochs": epochs}),
        recover=recover,
    )


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("recover") / "run"
    _train(folder, 1)
    return folder


def _state_file(folder: Path) -> Path:
    (state,) = sorted(folder.glob("training_state_e*_b*.th"))
    return state


@pytest.mark.parametrize("value", [10**9, -5, 1.5])
def test_recover_refuses_an_altered_epoch_count(one_epoch, tmp_path, value):
    folder = tmp_path / "run"
    shutil.copytree(one_epoch, folder)
    path = _state_file(folder)
    state = torch.load(path, weights_only=False) if torch.__version__ >= "2" else torch.load(path)
    state["epochs_completed"] = value
    torch.save(state, path)
    archive = (folder / "model.tar.gz").read_bytes()
    with pytest.raises(ConfigurationError) as raised:
        _train(folder, 1, recover=True)
    assert "epochs_completed" in str(raised.value) and str(path) in str(raised.value)
    assert (folder / "model.tar.gz").read_bytes() == archive


def test_recover_refuses_a_checkpoint_named_past_the_run(one_epoch, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(one_epoch, folder)
    path = _state_file(folder)
    state = torch.load(path, weights_only=False) if torch.__version__ >= "2" else torch.load(path)
    state["epochs_completed"] = 10**9
    torch.save(state, folder / "training_state_e1000000000_b0.th")
    os.replace(
        str(path).replace("training_state", "model_state"), folder / "model_state_e1000000000_b0.th"
    )
    path.unlink()
    archive = (folder / "model.tar.gz").read_bytes()
    with pytest.raises(ConfigurationError) as raised:
        _train(folder, 1, recover=True)
    assert "epochs_completed = 1000000000" in str(raised.value)
    assert "trainer.num_epochs = 1" in str(raised.value)
    assert (folder / "model.tar.gz").read_bytes() == archive


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"minutes": 1}',
        b"[1, 2]",
        b'[{"minutes": 1, "archive": "../../x.tar.gz"}]',
        b"[" * 600 + b"]" * 600,
    ],
)
def test_a_damaged_marks_file_is_named(tmp_path, content):
    folder = tmp_path / "archives"
    folder.mkdir()
    (folder / "marks.json").write_bytes(content)
    with pytest.raises(ConfigurationError) as raised:
        ArchiveAtMarksCallback(str(tmp_path), [1.0])
    assert str(folder / "marks.json") in str(raised.value)


def test_marks_giving_one_archive_name_are_refused(tmp_path):
    with pytest.raises(ConfigurationError) as raised:
        ArchiveAtMarksCallback(str(tmp_path), [0.1, 0.1000001])
    assert "elmoc_archive_at_marks.minutes" in str(raised.value)
    assert "model_0.1min.tar.gz" in str(raised.value)
