"""The full softmax output layer (`elmoc_softmax`): the loss, a projection, tied weights."""

import pytest
import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmoc_allennlp.modules.output_layers.softmax import SoftmaxOutputLayer
from tests.modules.output_layers.conftest import make_vocab, toy_problem


def test_softmax_loss_is_the_negative_log_likelihood():
    vocab = make_vocab(12)
    head = SoftmaxOutputLayer(vocab, input_dim=5)
    hidden, targets = toy_problem(12, 5, 7)
    loss = head(hidden, target_ids=targets)["loss"]
    assert loss.shape == (7,)
    log_probs = torch.log_softmax(hidden @ head.weight.t() + head.bias, dim=-1)
    assert torch.allclose(loss, -log_probs[torch.arange(7), targets], atol=1e-6)


def test_softmax_projection_when_embedding_dim_differs():
    head = SoftmaxOutputLayer(make_vocab(10), input_dim=6, embedding_dim=3)
    assert head.weight.shape == (10, 3)
    hidden, targets = toy_problem(10, 6, 4)
    expected = F.cross_entropy(
        F.linear(head.projection(hidden), head.weight, head.bias), targets, reduction="none"
    )
    assert torch.allclose(head(hidden, target_ids=targets)["loss"], expected)


def test_softmax_tie_weights_shares_the_input_embedding():
    head = SoftmaxOutputLayer(make_vocab(10), input_dim=4)
    embedding = torch.nn.Embedding(10, 4)
    head.tie_weights(embedding.weight)
    assert head.weight is embedding.weight
    hidden, targets = toy_problem(10, 4, 6)
    head(hidden, target_ids=targets)["loss"].sum().backward()
    assert embedding.weight.grad is not None and embedding.weight.grad.abs().sum() > 0
    with pytest.raises(ConfigurationError):
        head.tie_weights(torch.nn.Embedding(11, 4).weight)


def test_softmax_needs_a_vocabulary_namespace():
    with pytest.raises(ConfigurationError, match="vocab_namespace"):
        SoftmaxOutputLayer(Vocabulary(), input_dim=4)
