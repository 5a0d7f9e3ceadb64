"""Single-direction training (`model.directions`) and the forward + backward merge command (its
work on crafted weights bounded, issue #35)."""

import copy
import io
import json
import tarfile
from pathlib import Path
from typing import Dict

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch, Vocabulary
from allennlp.models import Model
from allennlp.models.archival import load_archive
from allennlp.training.callbacks import TrainerCallback

import elmoc_allennlp  # noqa: F401
import elmoc_allennlp.commands.merge_bilm  # noqa: F401  (registers the subcommand)
import elmoc_allennlp.training.atomic_checkpointer  # noqa: F401  (registers "elmoc_atomic")
from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives, merge_bilm_state_dicts
from elmoc_allennlp.common.archives import UnsafeArchiveError
from tests.common.archives.conftest import _with_weights
from tests.conftest import FIXTURES_ROOT, LM_CORPUS

INITIAL_WEIGHTS: Dict[str, Dict[str, torch.Tensor]] = {}


@TrainerCallback.register("elmoc_test_initial_weights")
class RecordInitialWeights(TrainerCallback):
    """Keeps a copy of the model's weights before training, under the run's directory name."""

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        state = trainer.model.state_dict()
        INITIAL_WEIGHTS[Path(self.serialization_dir).name] = {
            k: v.clone() for k, v in state.items()
        }


def _old_layout(model: dict) -> dict:
    """A model config as written before per-direction projections and heads: one of each."""
    model = copy.deepcopy(model)
    for key in ("input_projection_bias", "separate_input_projections"):
        model["contextualizer"].pop(key)
    model.pop("backward_output_layer")
    return model


def _train(serialization_dir: Path, directions: str, old_layout: bool = False):
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")).as_dict()
    params["model"]["directions"] = directions
    params["trainer"]["num_epochs"] = 1
    params["trainer"]["callbacks"] = [{"type": "elmoc_test_initial_weights"}]
    if old_layout:
        params["model"] = _old_layout(params["model"])
    return train_model(Params(params), str(serialization_dir))


@pytest.fixture(scope="module")
def single_direction_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("directions")
    models = {
        direction: _train(root / direction, direction) for direction in ("forward", "backward")
    }
    return root, models


@pytest.fixture(scope="module")
def old_layout_runs(tmp_path_factory):
    """Single-direction runs with the layout of archives written before: shared projection."""
    root = tmp_path_factory.mktemp("old_layout")
    for direction in ("forward", "backward"):
        _train(root / direction, direction, old_layout=True)
    return root


def _validation_batch(model):
    archive_reader_params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    from allennlp.data import DatasetReader

    reader = DatasetReader.from_params(archive_reader_params["dataset_reader"])
    instances = list(reader.read(LM_CORPUS / "valid.txt"))
    batch = Batch(instances)
    batch.index_instances(model.vocab)
    return batch.as_tensor_dict()


# The parameters each direction's job trains (the contextualizer's and the heads').
OWN_PARAMETERS = {
    "forward": (
        "_contextualizer.forward_layers.",
        "_contextualizer.input_projection.",
        "_contextualizer.input_layer_norm.",
        "_output_layer.",
    ),
    "backward": (
        "_contextualizer.backward_layers.",
        "_contextualizer.backward_input_projection.",
        "_contextualizer.backward_input_layer_norm.",
        "_backward_output_layer.",
    ),
}


def test_single_direction_trains_only_that_direction(single_direction_runs):
    _, models = single_direction_runs
    for direction, other in (("forward", "backward"), ("backward", "forward")):
        model = models[direction]
        trainable = {name for name, p in model.named_parameters() if p.requires_grad}
        assert trainable, direction
        assert all(name.startswith(OWN_PARAMETERS[direction]) for name in trainable), trainable
        # Every group of the direction is trained, its input projection included.
        for prefix in OWN_PARAMETERS[direction]:
            assert any(name.startswith(prefix) for name in trainable), prefix
        model.eval()
        output = model(**_validation_batch(model))
        assert f"{other}_loss" not in output
        assert torch.equal(output["loss"], output[f"{direction}_loss"])
        assert set(model.get_metrics()) == {
            f"{direction}_loss",
            "cosine_similarity",
            "retrieval_accuracy",
            f"{direction}_constant_baseline_loss",
            "constant_baseline_loss",
        }


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_a_single_direction_job_trains_its_input_projection(single_direction_runs, direction):
    _, models = single_direction_runs
    initial = INITIAL_WEIGHTS[direction]
    trained = models[direction].state_dict()
    changed = {
        name
        for name in trained
        if not torch.equal(trained[name], initial[name].to(trained[name].dtype))
    }
    own_projection = "_contextualizer." + ("" if direction == "forward" else "backward_")
    for name in ("input_projection.weight", "input_projection.bias", "input_layer_norm.weight"):
        assert own_projection + name in changed, name
    # Nothing of the other direction moved.
    other = "backward" if direction == "forward" else "forward"
    assert not {name for name in changed if name.startswith(OWN_PARAMETERS[other])}
    assert changed == {name for name in trained if name.startswith(OWN_PARAMETERS[direction])}


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
        assert torch.allclose(
            merged_output["forward_loss"], forward_output["forward_loss"], atol=1e-6
        )
        assert torch.allclose(
            merged_output["backward_loss"], backward_output["backward_loss"], atol=1e-6
        )
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
    # One input projection and one head per direction, each the job's that trained it: the
    # merged biLM is the jointly trained model's architecture (same parameters, same count).
    joint = Model.from_params(
        vocab=Vocabulary.empty(),
        params=Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")).pop("model"),
    )
    assert {n: p.shape for n, p in merged.named_parameters()} == {
        n: p.shape for n, p in joint.named_parameters()
    }
    for name, parameter in merged.named_parameters():
        source = backward if name.startswith(OWN_PARAMETERS["backward"]) else forward
        assert torch.equal(parameter, dict(source.named_parameters())[name]), name
    # A merged biLM trains both directions again, with its two heads and projections.
    merged.train()
    merged(**tensors)["loss"].backward()
    assert merged._backward_output_layer.projection.weight.grad is not None
    assert merged._contextualizer.backward_input_projection.weight.grad is not None


def test_merge_refuses_wrong_inputs(single_direction_runs, tmp_path):
    root, _ = single_direction_runs
    forward = str(root / "forward" / "model.tar.gz")
    backward = str(root / "backward" / "model.tar.gz")
    with pytest.raises(
        ConfigurationError, match="model.directions is 'forward', expected 'backward'"
    ):
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


def _repacked(source: str, destination: Path, change) -> str:
    """`source` with `change(folder)` applied to its extracted members."""
    folder = destination.with_suffix(".d")
    with tarfile.open(source) as tar:
        tar.extractall(folder)
    change(folder)
    with tarfile.open(destination, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name)
    return str(destination)


def test_vocabularies_are_compared_by_content_and_output_needs_force(
    single_direction_runs, tmp_path
):
    """allennlp writes non_padded_namespaces.txt in set order (it differs with PYTHONHASHSEED):
    the same vocabulary in another order merges; another vocabulary does not."""
    root, _ = single_direction_runs
    forward = str(root / "forward" / "model.tar.gz")
    backward = str(root / "backward" / "model.tar.gz")

    def reorder(folder: Path) -> None:
        path = folder / "vocabulary" / "non_padded_namespaces.txt"
        lines = path.read_text().split()
        assert len(lines) >= 2, lines
        path.write_text("\n".join(reversed(lines)) + "\n")

    reordered = _repacked(backward, tmp_path / "reordered.tar.gz", reorder)
    output = tmp_path / "merged.tar.gz"
    merge_bilm_archives(forward, reordered, str(output), verify=False)
    first = output.read_bytes()
    with pytest.raises(ConfigurationError, match="--force"):
        merge_bilm_archives(forward, reordered, str(output), verify=False)
    assert output.read_bytes() == first
    merge_bilm_archives(forward, reordered, str(output), verify=False, force=True)

    def extend(folder: Path) -> None:
        with open(folder / "vocabulary" / "non_padded_namespaces.txt", "a") as lines:
            lines.write("*extra\n")

    extended = _repacked(backward, tmp_path / "extended.tar.gz", extend)
    with pytest.raises(ConfigurationError, match="different vocabularies"):
        merge_bilm_archives(forward, extended, str(tmp_path / "x.tar.gz"), verify=False)
    assert not (tmp_path / "x.tar.gz").exists()


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
    with pytest.raises(ConfigurationError, match="model.directions"):
        Model.from_params(vocab=Vocabulary.empty(), params=model_params)


# ------------------------------------------------- runs with a shared projection and head


def _outputs(model, tensors):
    model.eval()
    with torch.no_grad():
        output = model(**tensors)
        layers, _ = model.contextual_layers(tensors["tokens"])
    return output["loss"], layers


def test_runs_with_a_shared_input_projection_and_head_merge(old_layout_runs, tmp_path):
    root = old_layout_runs
    paths = {d: str(root / d / "model.tar.gz") for d in ("forward", "backward")}
    old_forward = load_archive(paths["forward"]).model
    state = old_forward.state_dict()
    assert "_contextualizer.input_projection.weight" in state
    assert not any("backward_input" in key or "_backward_output_layer" in key for key in state)
    assert "_contextualizer.input_projection.bias" not in state  # no bias before LayerNorm
    # The shared projection stayed frozen in both old jobs (as they were trained then).
    assert torch.equal(
        state["_contextualizer.input_projection.weight"],
        INITIAL_WEIGHTS["forward"]["_contextualizer.input_projection.weight"],
    )

    # Old single-direction jobs still merge, into the old layout with two heads.
    merged_path = merge_bilm_archives(
        paths["forward"], paths["backward"], str(tmp_path / "m.tar.gz")
    )
    merged = load_archive(merged_path).model
    tensors = _validation_batch(merged)
    old_backward = load_archive(paths["backward"]).model
    merged_loss, merged_layers = _outputs(merged, tensors)
    half = merged_layers.size(-1) // 2
    torch.testing.assert_close(
        merged_layers[..., :half], _outputs(old_forward, tensors)[1][..., :half]
    )
    torch.testing.assert_close(
        merged_layers[..., half:], _outputs(old_backward, tensors)[1][..., half:]
    )


# ------------------------------------------------- the comparison's budget at its boundaries


def _saved_and_loaded(state, path):
    """`state` as a merge reads it: views keep sharing their storages."""
    from elmoc_allennlp.common.torch_versions import load_tensors

    torch.save(state, path)
    return load_tensors(str(path))


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("k", [1, 2], ids=["one_storage", "two_storages"])
def test_shared_views_compare_up_to_exactly_what_the_storages_hold(tmp_path, k, offset):
    # k storages of 10 values a run, the backward run's shifted by one value: every one-value view
    # is compared by value, and the budget is what the storages hold, k * (10 + 11) values.
    # Views compared up to the budget merge (as the plain comparison, key by key, finds them
    # equal); one value past it is refused, naming the parameter that passes it.
    size = 10
    budget = k * (size + size + 1)
    forward_storages = [torch.randn(size) for _ in range(k)]
    backward_storages = [torch.cat([torch.zeros(1), storage]) for storage in forward_storages]
    count = budget + offset
    keys = [f"_contextualizer.input_projection.view{index}" for index in range(count)]
    places = [(index % k, index // k % size) for index in range(count)]
    forward = {key: forward_storages[s][o : o + 1] for key, (s, o) in zip(keys, places)}
    backward = {key: backward_storages[s][o + 1 : o + 2] for key, (s, o) in zip(keys, places)}
    forward = _saved_and_loaded(forward, tmp_path / "forward.th")
    backward = _saved_and_loaded(backward, tmp_path / "backward.th")
    assert all(torch.equal(forward[key], backward[key]) for key in keys)  # the plain comparison
    if offset <= 0:
        merged = merge_bilm_state_dicts(forward, backward)
        assert list(merged) == keys and all(torch.equal(merged[key], forward[key]) for key in keys)
    else:
        with pytest.raises(ConfigurationError) as raised:
            merge_bilm_state_dicts(forward, backward)
        assert f"Parameter {keys[budget]}: " in str(raised.value)
        assert f"({budget:,})" in str(raised.value)


# ------------------------------------------------- bounded work on crafted weights (issue #35)


def test_merge_refuses_a_zero_stride_tensor_before_comparing(elmoc_archive, tmp_path):
    from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives

    buffer = io.BytesIO()
    torch.save({"huge": torch.zeros(1).expand(1 << 20, 1 << 20)}, buffer)
    first = _with_weights(elmoc_archive, tmp_path / "a.tar.gz", buffer.getvalue())
    second = _with_weights(elmoc_archive, tmp_path / "b.tar.gz", buffer.getvalue())
    with pytest.raises(UnsafeArchiveError) as raised:
        merge_bilm_archives(first, second, tmp_path / "merged.tar.gz")
    assert raised.value.member == "weights.th"
    assert not (tmp_path / "merged.tar.gz").exists()


def _merge(forward, backward):
    from elmoc_allennlp.commands.merge_bilm import merge_bilm_state_dicts

    return merge_bilm_state_dicts(forward, backward)


def _through_a_file(state, tmp_path, name):
    """`state` as a merge reads it, saved as `tmp_path / name`."""
    return _saved_and_loaded(state, tmp_path / name)


def _views(storage, offsets, length=999_000):
    return {
        f"_contextualizer.input_projection.p{i}": storage[o : o + length]
        for i, o in enumerate(offsets)
    }


@pytest.fixture
def compared_values(monkeypatch):
    """How many values `torch.equal` reads (both sides of each call counted once)."""
    counted = [0]
    original = torch.equal

    def equal(left, right):
        counted[0] += left.numel()
        return original(left, right)

    monkeypatch.setattr(torch, "equal", equal)
    return counted


def test_views_of_one_storage_are_compared_once(tmp_path, compared_values):
    """200 parameters viewing one storage of 10^6 values: 10^6 values compared, not 2 x 10^8."""
    storage = torch.randn(1_000_000)
    forward = _through_a_file(_views(storage, range(200)), tmp_path, "forward.th")
    backward = _through_a_file(_views(storage.clone(), range(200)), tmp_path, "backward.th")
    merged = _merge(forward, backward)
    assert compared_values[0] == 1_000_000
    assert all(torch.equal(merged[key], forward[key]) for key in forward)
    changed = storage.clone()
    changed[150_000] += 1  # inside every view: the first key compared differs
    backward = _through_a_file(_views(changed, range(200)), tmp_path, "changed.th")
    with pytest.raises(ConfigurationError, match="input_projection.p0 differs"):
        _merge(forward, backward)


def test_views_laid_out_differently_compare_by_value_within_a_bound(tmp_path, compared_values):
    weight = torch.randn(3, 4)
    forward = {"_contextualizer.input_projection.weight": weight.t()}  # not contiguous
    backward = {"_contextualizer.input_projection.weight": weight.t().contiguous()}
    _merge(forward, backward)
    # The same values at other offsets of their storages: compared value by value, which many
    # views of one storage would make unbounded; refused once it exceeds what the files hold.
    storage = torch.randn(1_000_000)
    forward = _through_a_file(_views(storage, range(200)), tmp_path, "forward.th")
    shifted = torch.cat([torch.zeros(1), storage])
    backward = _through_a_file(_views(shifted, range(1, 201)), tmp_path, "backward.th")
    with pytest.raises(ConfigurationError, match="input_projection.p2: .*than their storages hold"):
        _merge(forward, backward)
    assert compared_values[0] <= 2_000_001 + 999_000
