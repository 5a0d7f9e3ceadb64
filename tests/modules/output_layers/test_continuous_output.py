import math

import numpy
import pytest
import torch
from scipy.special import ive

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.continuous_output import (
    ContinuousOutputLayer,
    MIN_VMF_DIMENSION,
    log_bessel_iv,
    von_mises_fisher_log_normalizer,
)


def _head(loss: str) -> ContinuousOutputLayer:
    torch.manual_seed(0)
    return ContinuousOutputLayer(input_dim=4, embedding_dim=3, loss=loss)


def test_cosine_loss_matches_hand_computation():
    head = _head("cosine")
    hidden = torch.randn(5, 4)
    targets = torch.randn(5, 3)
    output = head(hidden, target_embeddings=targets)
    predictions = hidden @ head.projection.weight.t() + head.projection.bias
    expected = []
    for prediction, target in zip(predictions.tolist(), targets.tolist()):
        dot = sum(p * t for p, t in zip(prediction, target))
        norms = math.sqrt(sum(p * p for p in prediction)) * math.sqrt(sum(t * t for t in target))
        expected.append(1.0 - dot / norms)
    assert output["loss"].shape == (5,)
    assert torch.allclose(output["loss"], torch.tensor(expected), atol=1e-6)
    assert torch.allclose(output["predictions"], predictions, atol=1e-6)


def test_cosine_loss_is_zero_for_scaled_targets_and_two_for_opposite():
    head = _head("cosine")
    hidden = torch.randn(3, 4)
    predictions = head.projection(hidden).detach()
    assert torch.allclose(head(hidden, target_embeddings=2.5 * predictions)["loss"], torch.zeros(3), atol=1e-6)
    assert torch.allclose(head(hidden, target_embeddings=-predictions)["loss"], torch.full((3,), 2.0), atol=1e-6)


def test_l2_loss_matches_hand_computation():
    head = _head("l2")
    hidden, targets = torch.randn(5, 4), torch.randn(5, 3)
    output = head(hidden, target_embeddings=targets)
    expected = ((head.projection(hidden) - targets) ** 2).sum(-1)
    assert torch.allclose(output["loss"], expected)


@pytest.mark.parametrize("order", [5.0, 7.0, 20.0, 149.0])
def test_log_bessel_matches_scipy(order):
    kappa = numpy.array([0.5, 1.0, 5.0, 20.0, 100.0, 400.0, 700.0])
    with numpy.errstate(divide="ignore"):
        reference = numpy.log(ive(order, kappa)) + kappa
    finite = numpy.isfinite(reference)
    assert finite.sum() >= 3
    ours = log_bessel_iv(order, torch.tensor(kappa, dtype=torch.float64)).numpy()
    assert numpy.allclose(ours[finite], reference[finite], atol=1e-4, rtol=0)


@pytest.mark.parametrize("dimension", [12, 50, 300])
@pytest.mark.parametrize("kappa", [1.0, 10.0, 60.0])
def test_vmf_density_integrates_to_one_on_the_sphere(dimension, kappa):
    # ∫ C_m(κ) exp(κ t) (1 − t²)^((m−3)/2) |S^(m−2)| dt over t in [−1, 1] must be 1.
    from scipy.integrate import quad
    from scipy.special import gammaln

    log_c = von_mises_fisher_log_normalizer(torch.tensor(kappa, dtype=torch.float64), dimension).item()
    log_area = math.log(2.0) + 0.5 * (dimension - 1) * math.log(math.pi) - gammaln(0.5 * (dimension - 1))

    def density(t):
        return math.exp(log_c + kappa * t + 0.5 * (dimension - 3) * math.log1p(-t * t) + log_area)

    total, _ = quad(density, -1.0, 1.0, points=[min(0.999, kappa / (kappa + dimension))], limit=200)
    assert total == pytest.approx(1.0, abs=1e-3)


def test_vmf_loss_value_and_gradient():
    head = ContinuousOutputLayer(input_dim=4, embedding_dim=300, loss="vmf", vmf_norm_penalty=0.02)
    hidden = torch.randn(6, 4, requires_grad=True)
    targets = torch.randn(6, 300)
    loss = head(hidden, target_embeddings=targets)["loss"]
    prediction = head.projection(hidden).double()
    kappa = prediction.norm(dim=-1)
    unit = targets.double() / targets.double().norm(dim=-1, keepdim=True)
    order = 149.0
    log_iv = torch.tensor(numpy.log(ive(order, kappa.detach().numpy())) + kappa.detach().numpy())
    log_c = order * torch.log(kappa) - 150.0 * math.log(2 * math.pi) - log_iv
    expected = -log_c - (prediction * unit).sum(-1) + 0.02 * kappa
    finite = torch.isfinite(expected)
    assert torch.allclose(loss.double()[finite], expected[finite], atol=1e-3)
    loss.sum().backward()
    assert torch.isfinite(hidden.grad).all() and hidden.grad.abs().sum() > 0


def test_vmf_loss_prefers_aligned_predictions():
    head = ContinuousOutputLayer(input_dim=12, embedding_dim=12, loss="vmf")
    with torch.no_grad():
        head.projection.weight.copy_(torch.eye(12) * 5)
        head.projection.bias.zero_()
    hidden = torch.eye(12)[:1]
    aligned = head(hidden, target_embeddings=torch.eye(12)[:1])["loss"]
    opposite = head(hidden, target_embeddings=-torch.eye(12)[:1])["loss"]
    assert aligned.item() < opposite.item()


@pytest.mark.parametrize("dimension", [3, 11])
def test_vmf_loss_refuses_dimensions_its_expansion_does_not_cover(dimension):
    params = {"type": "elmoc_continuous", "input_dim": 4, "embedding_dim": dimension, "loss": "vmf"}
    with pytest.raises(ConfigurationError, match=r"output_layer\.embedding_dim is .*'vmf'.* 12"):
        LanguageModelOutputLayer.from_params(Params(params))
    # The same dimension is fine with the other losses, and 12 with vmf.
    ContinuousOutputLayer(input_dim=4, embedding_dim=dimension, loss="cosine")
    ContinuousOutputLayer(input_dim=4, embedding_dim=12, loss="vmf")


def test_log_bessel_is_accurate_down_to_the_smallest_vmf_dimension():
    order = MIN_VMF_DIMENSION / 2.0 - 1.0
    assert order >= 5.0
    kappa = numpy.array([1e-3, 0.1, 1.0, 10.0, 100.0])
    reference = numpy.log(ive(order, kappa)) + kappa
    ours = log_bessel_iv(order, torch.tensor(kappa, dtype=torch.float64)).numpy()
    assert numpy.allclose(ours, reference, atol=1e-4, rtol=0)


def test_from_params_and_bad_configuration():
    head = LanguageModelOutputLayer.from_params(
        Params({"type": "elmoc_continuous", "input_dim": 8, "embedding_dim": 5, "loss": "l2"})
    )
    assert isinstance(head, ContinuousOutputLayer)
    assert head.get_input_dim() == 8 and head.get_output_dim() == 5
    assert not head.requires_target_ids
    with pytest.raises(ConfigurationError, match="output_layer.loss"):
        ContinuousOutputLayer(8, 5, loss="hinge")
    with pytest.raises(ConfigurationError, match="embedding_dim"):
        head(torch.randn(2, 8), target_embeddings=torch.randn(2, 7))
