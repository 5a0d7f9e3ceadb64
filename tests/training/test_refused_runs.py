"""A plugin run refused before training leaves no serialization folder behind (issue #48): the corrected
rerun is not refused as a non-empty folder that would need `--recover`."""

import json

import pytest

from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import import_module_and_submodules

from elmoc_allennlp.training.refused_runs import folder_before_run, remove_refused_run
from tests.conftest import FIXTURES_ROOT

CONFIG = str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")


def test_a_refused_config_leaves_no_folder_and_the_corrected_rerun_trains(
    tmp_path, one_torch_thread
):
    import_module_and_submodules("elmoc_allennlp")
    serialization_dir = tmp_path / "runs" / "elmoc"
    with pytest.raises(TypeError, match="no_such_option"):
        train_model_from_file(
            CONFIG,
            str(serialization_dir),
            overrides=json.dumps({"trainer.num_epochs": 1, "model.no_such_option": 1}),
        )
    assert not serialization_dir.exists()
    assert list((tmp_path / "runs").iterdir()) == []  # nor its lock file
    train_model_from_file(
        CONFIG, str(serialization_dir), overrides=json.dumps({"trainer.num_epochs": 1})
    )
    assert (serialization_dir / "model.tar.gz").is_file()


def _folder(path, *names):
    path.mkdir()
    for name in names:
        (path / name).write_text("x")
    return path


def test_only_a_new_or_empty_folder_holding_nothing_trained_is_removed(tmp_path):
    refused = ConfigurationError("refused")
    new = tmp_path / "new"
    before = folder_before_run(new)
    assert before is None
    _folder(new, "config.json", "meta.json", "out.log", "stderr.log")
    (new / "vocabulary").mkdir()
    assert remove_refused_run(new, before, refused) and not new.exists()

    empty = _folder(tmp_path / "empty")
    before = folder_before_run(empty)
    (empty / "config.json").write_text("{}")
    assert remove_refused_run(empty, before, refused)
    assert empty.is_dir() and list(empty.iterdir()) == []  # it was there, empty: it stays, empty

    # Something trained (a checkpoint), a folder that held files, another error: kept.
    trained = _folder(tmp_path / "trained", "config.json", "model_state_e0_b0.th")
    assert (
        not remove_refused_run(trained, None, refused)
        and (trained / "model_state_e0_b0.th").exists()
    )
    full = _folder(tmp_path / "full", "notes.txt")
    before = folder_before_run(full)
    (full / "config.json").write_text("{}")
    assert not remove_refused_run(full, before, refused) and (full / "config.json").exists()
    crashed = _folder(tmp_path / "crashed", "config.json")
    assert not remove_refused_run(crashed, None, RuntimeError("out of memory")) and crashed.exists()
