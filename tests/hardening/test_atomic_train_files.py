"""`allennlp train` writes its archive and config.json atomically once the plugin is imported."""

import json
import os
import signal
import tarfile

import allennlp.commands.train as train_command
import allennlp.models
import allennlp.models.archival
from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.models.archival import load_archive

import elmoc_allennlp  # noqa: F401
from tests.conftest import FIXTURES_ROOT
from tests.crash_safety import killed_in_forked_child, partial_files


def _tiny_params() -> Params:
    return Params.from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"), json.dumps({"trainer.num_epochs": 1})
    )


def test_only_the_train_commands_archive_model_is_wrapped():
    from elmoc_allennlp.common.shims import _ORIGINALS

    wrapped = [
        original
        for (owner, name, _), original in _ORIGINALS.items()
        if owner is train_command and name == "archive_model"
    ]
    assert train_command.archive_model is not allennlp.models.archival.archive_model
    # allennlp's own function, as other callers import it, stays allennlp's.
    assert allennlp.models.archive_model is allennlp.models.archival.archive_model
    assert allennlp.models.archive_model in wrapped


def test_training_run_archive_is_atomic_and_loads(tmp_path):
    params = _tiny_params()
    assert params["trainer"]["checkpointer"]["type"] == "elmoc_atomic"
    train_model(params, str(tmp_path / "run"))
    run = tmp_path / "run"
    assert partial_files(run) == []
    with tarfile.open(run / "model.tar.gz") as tar:
        assert {"config.json", "weights.th", "vocabulary"} <= {m.name for m in tar.getmembers()}
    assert load_archive(run / "model.tar.gz").model is not None
    umask = os.umask(0o022)
    os.umask(umask)
    assert (run / "model.tar.gz").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    assert json.loads((run / "config.json").read_text())["model"]["type"] == "elmoc_bilm"


def test_sigkill_mid_archive_keeps_the_previous_archive(tmp_path):
    run = tmp_path / "run"
    train_model(_tiny_params(), str(run))
    before = (run / "model.tar.gz").read_bytes()

    def action():
        real_add = tarfile.TarFile.add

        def dying_add(self, name, arcname=None, *args, **kwargs):
            real_add(self, name, arcname, *args, **kwargs)
            if arcname == "weights.th":
                self.fileobj.flush()
                os.kill(os.getpid(), signal.SIGKILL)

        tarfile.TarFile.add = dying_add
        train_command.archive_model(str(run))

    killed_in_forked_child(action)
    assert (run / "model.tar.gz").read_bytes() == before
    assert len(partial_files(run)) == 1
    assert load_archive(run / "model.tar.gz").model is not None


def test_sigkill_mid_config_json_keeps_the_previous_one_for_recover(tmp_path):
    # `allennlp train --recover` rewrites config.json at every start, after reading it.
    config_file = tmp_path / "config.json"
    params = Params({"model": {"type": "elmoc_bilm", "note": "x" * 100000}})
    params.to_file(str(config_file))
    before = config_file.read_bytes()

    def action():
        def dying_dump(obj, handle, **kwargs):
            handle.write(json.dumps(obj)[:1000])
            handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        json.dump = dying_dump
        Params({"model": {"type": "elmoc_bilm", "note": "y" * 100000}}).to_file(str(config_file))

    killed_in_forked_child(action)
    assert config_file.read_bytes() == before
    assert Params.from_file(str(config_file))["model"]["note"] == "x" * 100000
    assert len(partial_files(tmp_path)) == 1
