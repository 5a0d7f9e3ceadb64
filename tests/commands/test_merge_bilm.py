"""Single-direction training (`model.directions`) and the forward + backward merge command."""
import json
import tarfile
from pathlib import Path

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch
from allennlp.models.archival import load_archive

import elmoc_allennlp  # noqa: F401
import elmoc_allennlp.commands.merge_bilm  # noqa: F401  (registers the subcommand)
import elmoc_allennlp.training.atomic_checkpointer  # noqa: F401  (registers "elmoc_atomic")
from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives, merge_bilm_state_dicts
from tests.conftest import FIXTURES_ROOT, LM_CORPUS


def _train(serialization_dir: Path, directions: str):
    overrides = {"model.directions": directions, "trainer.num_epochs": 1}
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"), json.dumps(overrides))
    return train_model(params, str(serialization_dir))


@pytest.fixture(scope="module")
def single_direction_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("directions")
    models = {direction: _train(root / direction, direction) for direction in ("forward", "backward")}
    return root, models


def _validation_batch(model):
    archive_reader_params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    from allennlp.data import DatasetReader

    reader = DatasetReader.from_params(archive_reader_params["dataset_reader"])
    instances = list(reader.read(LM_CORPUS / "valid.txt"))
    batch = Batch(instances)
    batch.index_instances(model.vocab)
    return batch.as_tensor_dict()


def test_single_direction_trains_only_that_stack(single_direction_runs):
    _, models = single_direction_runs
    for direction, other in (("forward", "backward"), ("backward", "forward")):
        model = models[direction]
        trainable = {name for name, p in model.named_parameters() if p.requires_grad}
        assert trainable, direction
        assert all(
            name.startswith(f"_contextualizer.{direction}_layers.")
            or name.startswith("_output_layer.")
            for name in trainable
        ), trainable
        assert not any(f"{other}_layers" in name or "input_projection" in name for name in trainable)
        model.eval()
        output = model(**_validation_batch(model))
        assert f"{other}_loss" not in output
        assert torch.equal(output["loss"], output[f"{direction}_loss"])
        assert set(model.get_metrics()) == {
            f"{direction}_loss",
            "cosine_similarity",
            "retrieval_accuracy",
        }


def test_merged_archive_is_exactly_both_runs(single_direction_runs, tmp_path):
    root, _ = single_direction_runs
    forward = load_archive(root / "forward" / "model.tar.gz").model.eval()
    backward = load_archive(root / "backward" / "model.tar.gz").model.eval()
    merged_path = merge_bilm_archives(
        str(root / "forward" / "model.tar.gz"),
        str(root / "backward" / "model.tar.gz"),
        str(tmp_path / "merged.tar.gz"),
    )
    assert not [p.name for p in tmp_path.iterdir() if ".partial-" in p.name]
    archive = load_archive(merged_path)
    merged = archive.model.eval()
    assert merged.directions == "both"
    assert archive.config["model"]["backward_output_layer"]["type"] == "elmoc_continuous"
    assert "directions" not in archive.config["model"]

    tensors = _validation_batch(merged)
    with torch.no_grad():
        merged_output = merged(**tensors)
        forward_output = forward(**tensors)
        backward_output = backward(**tensors)
        assert torch.allclose(merged_output["forward_loss"], forward_output["forward_loss"], atol=1e-6)
        assert torch.allclose(merged_output["backward_loss"], backward_output["backward_loss"], atol=1e-6)
        # The two heads really differ (each run trained its own).
        assert not torch.equal(
            merged._output_layer.projection.weight, merged._backward_output_layer.projection.weight
        )
        layers, _ = merged.contextual_layers(tensors["tokens"])
        forward_layers, _ = forward.contextual_layers(tensors["tokens"])
        backward_layers, _ = backward.contextual_layers(tensors["tokens"])
    half = layers.size(-1) // 2
    assert torch.allclose(layers[..., :half], forward_layers[..., :half], atol=1e-6)
    assert torch.allclose(layers[..., half:], backward_layers[..., half:], atol=1e-6)
    # A merged biLM trains both directions again, with its two heads.
    merged.train()
    merged(**tensors)["loss"].backward()
    assert merged._backward_output_layer.projection.weight.grad is not None


def test_merge_refuses_wrong_inputs(single_direction_runs, tmp_path):
    root, _ = single_direction_runs
    forward = str(root / "forward" / "model.tar.gz")
    backward = str(root / "backward" / "model.tar.gz")
    with pytest.raises(ConfigurationError, match="model.directions is 'forward', expected 'backward'"):
        merge_bilm_archives(forward, forward, str(tmp_path / "x.tar.gz"), verify=False)
    with pytest.raises(ConfigurationError, match="does not exist"):
        merge_bilm_archives(forward, str(tmp_path / "missing.tar.gz"), str(tmp_path / "x.tar.gz"))
    (tmp_path / "junk.tar.gz").write_bytes(b"not an archive")
    with pytest.raises(ConfigurationError, match="junk.tar.gz is not a readable model archive"):
        merge_bilm_archives(forward, str(tmp_path / "junk.tar.gz"), str(tmp_path / "x.tar.gz"))
    assert not (tmp_path / "x.tar.gz").exists()

    # A different architecture is named by its config key.
    with tarfile.open(backward) as tar:
        tar.extractall(tmp_path / "b")
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    config["model"]["contextualizer"]["cell_dim"] += 1
    (tmp_path / "b" / "config.json").write_text(json.dumps(config))
    with tarfile.open(tmp_path / "other.tar.gz", "w:gz") as tar:
        for name in ("config.json", "weights.th", "vocabulary"):
            tar.add(tmp_path / "b" / name, arcname=name)
    with pytest.raises(ConfigurationError, match=r"model\.contextualizer\.cell_dim is 10 .* 11"):
        merge_bilm_archives(forward, str(tmp_path / "other.tar.gz"), str(tmp_path / "x.tar.gz"))


def test_merge_requires_identical_shared_parameters():
    forward = {
        "_contextualizer.input_projection.weight": torch.ones(2, 2),
        "_contextualizer.forward_layers.0.w": torch.ones(1),
        "_contextualizer.backward_layers.0.w": torch.zeros(1),
        "_output_layer.projection.weight": torch.ones(3),
    }
    backward = {key: value + 1 for key, value in forward.items()}
    backward["_contextualizer.input_projection.weight"] = torch.ones(2, 2)
    merged = merge_bilm_state_dicts(forward, backward)
    assert torch.equal(merged["_contextualizer.forward_layers.0.w"], torch.ones(1))
    assert torch.equal(merged["_contextualizer.backward_layers.0.w"], torch.ones(1))
    assert torch.equal(merged["_output_layer.projection.weight"], torch.ones(3))
    assert torch.equal(merged["_backward_output_layer.projection.weight"], torch.full((3,), 2.0))
    backward["_contextualizer.input_projection.weight"] = torch.zeros(2, 2)
    with pytest.raises(ConfigurationError, match="input_projection.weight differs .* random_seed"):
        merge_bilm_state_dicts(forward, backward)


def test_directions_is_validated():
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    from allennlp.data import Vocabulary
    from allennlp.models import Model

    model_params = params["model"]
    model_params["directions"] = "sideways"
    with pytest.raises(ConfigurationError, match="model.directions must be one of"):
        Model.from_params(vocab=Vocabulary.empty(), params=model_params)
