import math

import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.continuous_output import ContinuousOutputLayer


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
    assert torch.allclose(
        head(hidden, target_embeddings=2.5 * predictions)["loss"], torch.zeros(3), atol=1e-6
    )
    assert torch.allclose(
        head(hidden, target_embeddings=-predictions)["loss"], torch.full((3,), 2.0), atol=1e-6
    )


def test_l2_loss_matches_hand_computation():
    head = _head("l2")
    hidden, targets = torch.randn(5, 4), torch.randn(5, 3)
    output = head(hidden, target_embeddings=targets)
    expected = ((head.projection(hidden) - targets) ** 2).sum(-1)
    assert torch.allclose(output["loss"], expected)


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
