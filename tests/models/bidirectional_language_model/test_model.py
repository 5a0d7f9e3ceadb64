import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from allennlp.common import Params
from allennlp.common.testing import ModelTestCase
from allennlp.data import Batch, Vocabulary
from allennlp.models import Model

import elmoc_allennlp  # noqa: F401  (registers the plugin's components)
from tests.conftest import FIXTURES_ROOT, LM_CORPUS

METRICS = {
    "forward_loss",
    "backward_loss",
    "cosine_similarity",
    "retrieval_accuracy",
    "forward_constant_baseline_loss",
    "backward_constant_baseline_loss",
    "constant_baseline_loss",
}


class TestBidirectionalLanguageModel(ModelTestCase):
    def setup_method(self):
        super().setup_method()
        self.set_up_model(FIXTURES_ROOT / "elmoc_tiny.jsonnet", LM_CORPUS / "valid.txt")

    def test_can_train_save_and_load(self):
        self.ensure_model_can_train_save_and_load(
            self.param_file, gradients_to_ignore=None, overrides=""
        )

    def test_model_batch_norm_verification(self):
        # allennlp's check flags the input projection's bias before its LayerNorm, on the premise
        # that the normalisation cancels a bias. For LayerNorm (mean over features) it does not:
        # only the bias's mean is removed.
        encoder = self.model._contextualizer
        projection, layer_norm = encoder.input_projection, encoder.input_layer_norm
        assert projection.bias is not None
        inputs = torch.randn(5, projection.in_features)
        with torch.no_grad():
            projection.bias.normal_()
            with_bias = layer_norm(projection(inputs))
            without_bias = layer_norm(inputs @ projection.weight.t())
            centred_bias = projection.bias - projection.bias.mean()
            shifted = layer_norm(inputs @ projection.weight.t() + centred_bias)
        assert (with_bias - without_bias).abs().max() > 0.1
        torch.testing.assert_close(with_bias, shifted, atol=1e-5, rtol=1e-5)

    def test_batch_predictions_are_consistent(self):
        self.ensure_batch_predictions_are_consistent()

    def _tensors(self):
        batch = Batch(self.instances)
        batch.index_instances(self.vocab)
        return batch.as_tensor_dict()

    def test_loss_is_mean_of_directions_and_equals_hand_computed_cosine(self):
        self.model.eval()
        tensors = self._tensors()
        output = self.model(**tensors)
        # A per-direction figure (the trainer steps each direction on its own loss).
        assert torch.allclose(
            output["loss"], (output["forward_loss"] + output["backward_loss"]) / 2
        )
        tokens = tensors["tokens"]
        embedded = self.model._text_field_embedder(tokens)
        mask = tokens["fasttext"]["mask"]
        states = self.model._contextualizer(embedded, mask)
        # One head per direction (the paper config's two independent LMs).
        projection = self.model._output_layer.projection
        backward_projection = self.model._backward_output_layer.projection
        assert not torch.equal(projection.weight, backward_projection.weight)
        half = states.size(-1) // 2
        forward_losses, backward_losses = [], []
        for row in range(mask.size(0)):
            length = int(mask[row].sum())
            for t in range(length - 1):
                prediction = projection(states[row, t, :half])
                forward_losses.append(
                    1 - F.cosine_similarity(prediction, embedded[row, t + 1], dim=0)
                )
                prediction = backward_projection(states[row, t + 1, half:])
                backward_losses.append(1 - F.cosine_similarity(prediction, embedded[row, t], dim=0))
        assert math.isclose(
            output["forward_loss"].item(), torch.stack(forward_losses).mean().item(), rel_tol=1e-5
        )
        assert math.isclose(
            output["backward_loss"].item(), torch.stack(backward_losses).mean().item(), rel_tol=1e-5
        )

    def test_target_vectors_are_what_the_forward_loss_compares_with(self):
        self.model.eval()
        tensors = self._tensors()
        output = self.model(**tensors)
        tokens = tensors["tokens"]
        targets, mask = self.model.target_vectors(tokens)
        assert not targets.requires_grad
        assert targets.shape[:2] == mask.shape
        states = self.model._contextualizer(self.model._text_field_embedder(tokens), mask)
        half = states.size(-1) // 2
        pairs = mask[:, :-1] & mask[:, 1:]
        predictions = self.model._output_layer.projection(states[:, :-1, :half])[pairs]
        cosine = F.cosine_similarity(predictions, targets[:, 1:][pairs], dim=-1)
        assert math.isclose(output["forward_loss"].item(), (1 - cosine).mean().item(), rel_tol=1e-5)

    def test_gradients_reach_encoder_and_head_but_not_frozen_vectors(self):
        self.model.train()
        output = self.model(**self._tensors())
        output["loss"].backward()
        named = dict(self.model.named_parameters())
        assert named, "model has no parameters"
        assert not any(
            "text_field_embedder" in name for name in named
        ), "frozen fastText vectors must not be parameters"
        for name, parameter in named.items():
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        embedder = self.model._text_field_embedder._token_embedders["fasttext"]
        # No table in the state: only the record of which vectors were used.
        assert list(embedder.state_dict()) == ["vectors_record"]

    def test_metrics_are_not_read_after_every_training_step(self):
        self.model.train()
        self.model(**self._tensors())
        assert self.model.get_metrics() == {}  # allennlp's per-step read: no device read
        metrics = self.model.get_metrics(reset=True)  # end of epoch: read and reset
        assert set(metrics) == METRICS
        assert metrics["forward_loss"] > 0

    def test_metrics(self):
        self.model.eval()
        self.model(**self._tensors())
        metrics = self.model.get_metrics(reset=True)
        assert set(metrics) == METRICS
        assert 0.0 <= metrics["retrieval_accuracy"] <= 1.0
        assert -1.0 <= metrics["cosine_similarity"] <= 1.0
        assert math.isclose(
            1 - metrics["cosine_similarity"],
            0.5 * (metrics["forward_loss"] + metrics["backward_loss"]),
            rel_tol=1e-4,
        )

    def test_constant_baseline_is_the_loss_of_predicting_each_directions_mean_target(self):
        self.model.eval()
        tensors = self._tensors()
        self.model.get_metrics(reset=True)
        self.model(**tensors)
        self.model(**tensors)  # two batches: the baseline is over all their targets
        metrics = self.model.get_metrics(reset=True)
        targets, mask = self.model.target_vectors(tensors["tokens"])
        pairs = mask[:, :-1] & mask[:, 1:]
        for direction, direction_targets in (
            ("forward", targets[:, 1:][pairs]),
            ("backward", targets[:, :-1][pairs]),
        ):
            mean_direction = F.normalize(direction_targets.double(), dim=-1).mean(0)
            cosine = F.cosine_similarity(
                mean_direction.expand_as(direction_targets), direction_targets.double(), dim=-1
            )
            expected = (1 - cosine).mean().item()
            assert metrics[f"{direction}_constant_baseline_loss"] == pytest.approx(
                expected, abs=1e-6
            )
        assert metrics["constant_baseline_loss"] == pytest.approx(
            (metrics["forward_constant_baseline_loss"] + metrics["backward_constant_baseline_loss"])
            / 2
        )
        # The two directions' targets differ (the boundary tokens), so do their baselines.
        assert (
            metrics["forward_constant_baseline_loss"] != metrics["backward_constant_baseline_loss"]
        )

    def test_a_one_direction_model_has_its_directions_baseline_only(self):
        params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
        params["model"]["directions"] = "backward"
        params["model"]["contextualizer"]["separate_input_projections"] = True
        model = Model.from_params(vocab=self.vocab, params=params.pop("model"))
        model.eval()
        model(**self._tensors())
        metrics = model.get_metrics(reset=True)
        assert "forward_constant_baseline_loss" not in metrics
        assert metrics["constant_baseline_loss"] == metrics["backward_constant_baseline_loss"] > 0

    def test_retrieval_accuracy_is_one_when_predictions_are_the_targets(self):
        targets = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
        self.model.eval()
        assert self.model._retrieval_accuracy_of(targets * 3.0, targets) == 1.0
        shuffled = targets[[1, 0, 1, 0]]
        assert self.model._retrieval_accuracy_of(shuffled, targets) == 0.0

    def test_contextual_layers_shape_and_top_layer_equals_contextualizer_output(self):
        self.model.eval()
        batch = Batch(self.instances)
        batch.index_instances(self.vocab)
        tokens = batch.as_tensor_dict()["tokens"]
        layers, mask = self.model.contextual_layers(tokens)
        encoder = self.model._contextualizer
        assert layers.shape == (encoder.num_layers + 1, *mask.shape, encoder.get_output_dim())
        top = encoder(self.model._text_field_embedder(tokens), mask)
        assert torch.allclose(layers[-1], top, atol=1e-6)
        half = encoder.get_output_dim() // 2
        # Layer 0: each direction's own projected, normalised input.
        embedded = self.model._text_field_embedder(tokens)
        for projection, layer_norm, layer in (
            (encoder.input_projection, encoder.input_layer_norm, layers[0, ..., :half]),
            (
                encoder.backward_input_projection,
                encoder.backward_input_layer_norm,
                layers[0, ..., half:],
            ),
        ):
            expected = layer_norm(projection(embedded)) * mask.unsqueeze(-1)
            torch.testing.assert_close(layer, expected, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(layers[0, ..., :half], layers[0, ..., half:])

    def test_public_accessors_are_the_modules_the_model_runs(self):
        model = self.model
        encoder = model.contextualizer
        assert encoder.get_output_dim() == 2 * model.output_layer("forward").get_input_dim()
        # elmoc_tiny has a head and an input projection per direction.
        assert model.output_layer("forward") is not model.output_layer("backward")
        parameter_ids = {
            direction: {id(p) for _, p in model.direction_parameters(direction)}
            for direction in ("forward", "backward")
        }
        assert not parameter_ids["forward"] & parameter_ids["backward"]
        for direction in ("forward", "backward"):
            owned = [
                getattr(encoder, f"{direction}_layers"),
                model.output_layer(direction),
                (
                    encoder.input_projection
                    if direction == "forward"
                    else encoder.backward_input_projection
                ),
            ]
            assert {id(p) for module in owned for p in module.parameters()} <= parameter_ids[
                direction
            ]
        shared = {id(p) for p in model.text_field_embedder.parameters()}
        assert not shared & (parameter_ids["forward"] | parameter_ids["backward"])

    def test_layer_groups_cover_every_parameter_bottom_to_top(self):
        names = [name for name, _ in self.model.named_parameters()]
        groups = self.model.layer_groups(names)
        labels = [label for label, _ in groups]
        assert labels == ["layer 0"] + [
            f"layer {i + 1}" for i in range(self.model.contextualizer.num_layers)
        ] + ["output"]
        assert sorted(name for _, group in groups for name in group) == sorted(names)


def test_degenerate_target_vectors_stop_the_model_at_construction(monkeypatch, tmp_path):
    """fastText vectors near one direction: a biLM would look good predicting that direction."""
    from benchmarks.common import write_fasttext_bin
    from elmoc_allennlp.fasttext.health import DegenerateVectorsError

    rng = np.random.default_rng(0)
    words = ["</s>"] + [f"word{index}" for index in range(50)]
    bucket, dim = 0, 16  # no n-grams: words like these share most of theirs
    for name, shared in (("degenerate.bin", 1.0), ("healthy.bin", 0.0)):
        matrix = shared * rng.standard_normal(dim) + (1.02 - shared) * rng.standard_normal(
            (len(words) + bucket, dim)
        )
        write_fasttext_bin(
            tmp_path / name, words, matrix.astype(np.float32), minn=2, maxn=0, bucket=bucket
        )

    def model_with(name):
        monkeypatch.setenv("ELMOC_TEST_FASTTEXT", str(tmp_path / name))
        params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
        return Model.from_params(vocab=Vocabulary(), params=params.pop("model"))

    with pytest.raises(
        DegenerateVectorsError,
        match=(
            r"degenerate\.bin are degenerate: mean pairwise cosine of the 50 most frequent words "
            r"(0\.99[0-9]|1\.000)"
        ),
    ):
        model_with("degenerate.bin")
    assert model_with("healthy.bin").get_metrics(reset=True)["constant_baseline_loss"] == 0.0
