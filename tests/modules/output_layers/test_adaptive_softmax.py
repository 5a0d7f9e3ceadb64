"""The adaptive softmax output layer (`elmoc_adaptive_softmax`)."""

import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.modules.output_layers.adaptive_softmax import AdaptiveSoftmaxOutputLayer
from tests.modules.output_layers.conftest import make_vocab, toy_problem


def test_adaptive_log_probabilities_sum_to_one_and_give_the_loss():
    torch.manual_seed(0)
    head = AdaptiveSoftmaxOutputLayer(make_vocab(60), input_dim=8, cutoffs=[10, 30], div_value=2.0)
    hidden, targets = toy_problem(60, 8, 11)
    log_probs = head.log_probabilities(hidden)
    assert log_probs.shape == (11, 60)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(11), atol=1e-5)
    loss = head(hidden, target_ids=targets)["loss"]
    assert torch.allclose(loss, -log_probs[torch.arange(11), targets], atol=1e-5)
    loss.sum().backward()
    assert all(p.grad is not None for p in head.parameters())


def test_adaptive_parameter_count():
    head = AdaptiveSoftmaxOutputLayer(
        make_vocab(100), input_dim=16, cutoffs=[10, 40], div_value=4.0
    )
    # Head: 10 words + 2 clusters; tails: 16 -> 4 -> 30 words, 16 -> 1 -> 60 words.
    expected = 16 * 12 + (16 * 4 + 4 * 30) + (16 * 1 + 1 * 60)
    assert sum(p.numel() for p in head.parameters()) == expected


@pytest.mark.parametrize("cutoffs", [[], [30, 10], [10, 100], [0, 5]])
def test_adaptive_rejects_bad_cutoffs(cutoffs):
    with pytest.raises(ConfigurationError, match="cutoffs"):
        AdaptiveSoftmaxOutputLayer(make_vocab(100), input_dim=16, cutoffs=cutoffs)
