"""`allennlp train --recover` continues an interrupted ELMo-C pretraining run from its checkpoint."""

import json
import os

import pytest

from allennlp.commands.train import train_model_from_file
from allennlp.models.archival import load_archive
from allennlp.training.callbacks import TrainerCallback

import elmoc_allennlp  # noqa: F401
from tests.conftest import FIXTURES_ROOT

CRASH_VARIABLE = "ELMOC_TEST_CRASH_AFTER_EPOCH"


class SimulatedCrash(RuntimeError):
    pass


@TrainerCallback.register("elmoc_test_crash")
class CrashAfterEpoch(TrainerCallback):
    """Raises at the end of the epoch named by the environment, before its checkpoint is saved."""

    def on_epoch(self, trainer, metrics, epoch, is_primary=True, **kwargs) -> None:
        if os.environ.get(CRASH_VARIABLE) == str(epoch):
            raise SimulatedCrash(f"simulated crash after epoch {epoch}")


def test_recover_continues_from_the_last_checkpoint(tmp_path, monkeypatch):
    config = str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")
    # Dotted keys: a nested {"trainer": {...}} override would replace the whole trainer block.
    overrides = json.dumps(
        {"trainer.num_epochs": 3, "trainer.callbacks": [{"type": "elmoc_test_crash"}]}
    )
    run = tmp_path / "run"
    monkeypatch.setenv(CRASH_VARIABLE, "1")
    with pytest.raises(SimulatedCrash):
        train_model_from_file(config, str(run), overrides=overrides)
    assert (run / "metrics_epoch_0.json").exists()
    assert not (run / "model.tar.gz").exists()
    first_epoch_metrics = (run / "metrics_epoch_0.json").read_text()

    monkeypatch.delenv(CRASH_VARIABLE)
    train_model_from_file(config, str(run), overrides=overrides, recover=True)
    # Epoch 0 was not retrained: its metrics file is untouched; epochs 1 and 2 ran.
    assert (run / "metrics_epoch_0.json").read_text() == first_epoch_metrics
    final = json.loads((run / "metrics.json").read_text())
    assert final["epoch"] == 2, final
    assert (run / "metrics_epoch_2.json").exists()
    archive = load_archive(str(run / "model.tar.gz"))
    assert type(archive.model).__name__ == "BidirectionalLanguageModel"
