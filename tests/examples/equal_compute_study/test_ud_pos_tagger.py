"""The equal-compute study's POS config trains with its own `--include-package` module."""

import json
from pathlib import Path

from allennlp.commands.train import train_model_from_file
from allennlp.common import Params
from allennlp.common.util import import_module_and_submodules

CONFIG = (
    Path(__file__).resolve().parents[3]
    / "examples"
    / "equal_compute_study"
    / "ud_pos_tagger.jsonnet"
)


def test_pos_config_trains_with_the_study_package(downstream_environment, tmp_path):
    import_module_and_submodules("allennlp_models.tagging")
    import_module_and_submodules("examples.equal_compute_study")
    train_model_from_file(
        str(CONFIG), str(tmp_path / "run"), overrides=json.dumps({"trainer.num_epochs": 1})
    )
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for split in ("validation", "test"):
        assert 0.0 <= metrics[f"{split}_accuracy"] <= 1.0


def test_empty_archive_is_the_fasttext_only_baseline(downstream_environment, monkeypatch):
    monkeypatch.setenv("ELMOC_ARCHIVE", "")
    monkeypatch.delenv("ELMOC_DIM")
    params = Params.from_file(str(CONFIG)).as_dict()
    embedders = params["model"]["text_field_embedder"]["token_embedders"]
    assert sorted(embedders) == sorted(params["dataset_reader"]["token_indexers"]) == ["tokens"]
    assert params["model"]["encoder"]["input_size"] == 16
