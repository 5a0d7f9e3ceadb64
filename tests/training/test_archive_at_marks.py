import json
from pathlib import Path

import pytest
import torch

from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import import_module_and_submodules
from allennlp.models.archival import load_archive

from elmoc_allennlp.training import archive_at_marks
from elmoc_allennlp.training.archive_at_marks import ArchiveAtMarksCallback, read_marks

FIXTURES_ROOT = Path(__file__).parents[1] / "fixtures"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(archive_at_marks.time, "monotonic", fake)
    return fake


@pytest.mark.parametrize("minutes", [[], [0.0, 1.0], [2.0, 1.0], [1.0, 1.0], [-1.0]])
def test_marks_must_be_positive_and_increasing(tmp_path, minutes):
    with pytest.raises(ConfigurationError, match="minutes"):
        ArchiveAtMarksCallback(str(tmp_path), minutes=minutes)


def test_elapsed_time_survives_a_checkpoint(tmp_path, clock):
    callback = ArchiveAtMarksCallback(str(tmp_path), minutes=[1.0])
    callback.on_start(trainer=None)
    clock.now += 90.0
    state = callback.state_dict()
    assert state["elapsed_seconds"] == pytest.approx(90.0)

    resumed = ArchiveAtMarksCallback(str(tmp_path), minutes=[1.0])
    resumed.load_state_dict(state)
    resumed.on_start(trainer=None)
    clock.now += 30.0
    assert resumed.elapsed_seconds() == pytest.approx(120.0)


def test_marks_are_archived_once_during_allennlp_train(tmp_path, tiny_fasttext_path):
    import_module_and_submodules("elmoc_allennlp")
    serialization_dir = tmp_path / "run"
    callbacks = [{"type": "elmoc_archive_at_marks", "minutes": [1e-7, 2e-7, 1e4]}]
    train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(serialization_dir),
        overrides=json.dumps({"trainer.callbacks": callbacks}),
    )
    records = read_marks(str(serialization_dir))
    # Both small marks pass during the first batch; the large one never does.
    assert [r["minutes"] for r in records] == [1e-7, 2e-7]
    assert all(r["epoch"] == 0 and r["batch"] == 1 for r in records)
    assert not list(serialization_dir.glob(".weights_at_*"))

    early = load_archive(records[0]["archive"]).model
    final = load_archive(str(serialization_dir / "model.tar.gz")).model
    early_state, final_state = early.state_dict(), final.state_dict()
    assert early_state.keys() == final_state.keys()
    # The mark's archive holds the weights after one step, not the final ones.
    trained = [k for k, v in final.named_parameters() if v.requires_grad]
    assert any(not torch.allclose(early_state[k], final_state[k]) for k in trained)
    # ... and the same vectors record (path and fingerprint of the fastText model).
    records_of_vectors = [k for k in final_state if "vectors_record" in k]
    assert records_of_vectors
    for key in records_of_vectors:
        assert torch.equal(early_state[key], final_state[key])
