"""The sampled softmax output layer (`elmoc_sampled_softmax`) and its log-uniform sampler; the frozen
and the fixed (fastText) output embeddings."""

import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.modules.sampled_softmax_loss import _choice

from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.sampled_softmax import (
    LogUniformSampler,
    SampledSoftmaxOutputLayer,
)
from tests.modules.output_layers.conftest import make_vocab, toy_problem

# ----------------------------------------------------------------------------- sampler


def test_log_uniform_sampler_draws_distinct_classes_in_range():
    sampler = LogUniformSampler(range_max=100, num_samples=30)
    classes, num_tries = sampler.draw(np.random.default_rng(0))
    assert len(classes) == 30 and len(set(classes.tolist())) == 30
    assert classes.min() >= 0 and classes.max() < 100
    assert num_tries >= 30
    # All candidates: the sample is the whole range.
    everything, _ = LogUniformSampler(range_max=20, num_samples=20).draw(np.random.default_rng(1))
    assert sorted(everything.tolist()) == list(range(20))


def test_log_uniform_sampler_matches_allennlps_choice_in_distribution():
    np.random.seed(0)
    sampler = LogUniformSampler(range_max=1000, num_samples=100)
    ours = [sampler.draw() for _ in range(300)]
    theirs = [_choice(1000, 100) for _ in range(300)]
    our_tries = np.mean([tries for _, tries in ours])
    their_tries = np.mean([tries for _, tries in theirs])
    assert abs(our_tries - their_tries) < 0.05 * their_tries
    # Frequent classes are drawn more often: class 0 almost always, the last class rarely.
    our_first = np.mean([0 in classes for classes, _ in ours])
    our_last = np.mean([999 in classes for classes, _ in ours])
    assert our_first > 0.99 and our_last < 0.1


def test_expected_count_is_tensorflows_formula():
    sampler = LogUniformSampler(range_max=50, num_samples=10)
    classes = torch.tensor([0, 1, 10, 49])
    probabilities = (np.log(classes.numpy() + 2.0) - np.log(classes.numpy() + 1.0)) / np.log(51)
    assert np.allclose(sampler.probabilities(classes).numpy(), probabilities)
    expected = 1.0 - (1.0 - probabilities) ** 37
    assert np.allclose(sampler.expected_count(classes, 37).numpy(), expected, atol=1e-6)
    # The probabilities of all classes sum to one.
    assert math.isclose(sampler.probabilities(torch.arange(50)).sum().item(), 1.0, rel_tol=1e-9)


def test_sampler_rejects_more_samples_than_candidates():
    with pytest.raises(ConfigurationError, match="num_samples"):
        SampledSoftmaxOutputLayer(make_vocab(10), input_dim=4, num_samples=10)  # 9 candidates


# ----------------------------------------------------------------------------- sampled softmax


def test_sampled_loss_is_hand_computed_with_log_q_and_accidental_hits(monkeypatch):
    torch.manual_seed(0)
    head = SampledSoftmaxOutputLayer(make_vocab(20), input_dim=4, num_samples=5)
    with torch.no_grad():
        head.bias.normal_()
    sampled = torch.tensor([2, 5, 7, 11, 3])
    monkeypatch.setattr(head, "sample", lambda device: (sampled, 9))
    hidden = torch.randn(3, 4)
    targets = torch.tensor([5, 13, 2])  # 5 and 2 are accidental hits
    loss = head(hidden, target_ids=targets)["loss"]

    def log_q(ids):
        p = torch.log((ids.double() + 1.0) / ids.double()) / math.log(20)  # candidates: ids 1..19
        return torch.log(1.0 - (1.0 - p) ** 9).float()

    weight, bias = head.weight, head.bias[:, 0]
    for row in range(3):
        target = targets[row]
        logits = [hidden[row] @ weight[target] + bias[target] - log_q(target)]
        for negative in sampled:
            if negative != target:
                logits.append(hidden[row] @ weight[negative] + bias[negative] - log_q(negative))
        expected = -torch.log_softmax(torch.stack(logits), dim=0)[0]
        assert torch.allclose(loss[row], expected, atol=1e-5), row


def test_sampled_softmax_never_draws_padding():
    head = SampledSoftmaxOutputLayer(make_vocab(6), input_dim=3, num_samples=5)
    for _ in range(20):
        ids, _ = head.sample(torch.device("cpu"))
        assert sorted(ids.tolist()) == [1, 2, 3, 4, 5]


def test_sampled_softmax_eval_mode_is_the_full_softmax():
    torch.manual_seed(0)
    head = SampledSoftmaxOutputLayer(make_vocab(30), input_dim=4, num_samples=8).eval()
    hidden, targets = toy_problem(30, 4, 9)
    expected = F.cross_entropy(
        hidden @ head.weight.t() + head.bias[:, 0], targets, reduction="none"
    )
    assert torch.allclose(head(hidden, target_ids=targets)["loss"], expected, atol=1e-6)


def test_sampled_loss_approaches_the_full_softmax_as_samples_cover_the_vocabulary():
    torch.manual_seed(0)
    np.random.seed(0)
    num_words = 41  # 40 candidates besides padding
    hidden, targets = toy_problem(num_words, 6, 64)
    full = SampledSoftmaxOutputLayer(make_vocab(num_words), input_dim=6, num_samples=4)
    with torch.no_grad():
        full.weight.normal_()
        full.bias.normal_()
        full_loss = full.eval()(hidden, target_ids=targets)["loss"].mean().item()
    gaps = []
    for num_samples in (4, 16, 40):
        head = SampledSoftmaxOutputLayer(
            make_vocab(num_words), input_dim=6, num_samples=num_samples
        )
        head.load_state_dict(full.state_dict())
        with torch.no_grad():
            expected = np.mean(
                [head(hidden, target_ids=targets)["loss"].mean().item() for _ in range(100)]
            )
        gaps.append(abs(expected - full_loss))
    assert gaps[0] > gaps[1] > gaps[2], gaps
    assert gaps[2] < 0.02 * full_loss, gaps


def test_sparse_gradients_touch_only_the_target_and_sampled_rows(monkeypatch):
    head = SampledSoftmaxOutputLayer(make_vocab(50), input_dim=4, num_samples=6, sparse=True)
    sampled = torch.tensor([1, 2, 3, 8, 13, 21])
    monkeypatch.setattr(head, "sample", lambda device: (sampled, 12))
    hidden, _ = toy_problem(50, 4, 3)
    targets = torch.tensor([40, 41, 3])
    head(hidden, target_ids=targets)["loss"].sum().backward()
    assert head.weight.grad.is_sparse and head.bias.grad.is_sparse
    touched = set(head.weight.grad.coalesce().indices()[0].tolist())
    assert touched == {1, 2, 3, 8, 13, 21, 40, 41}


def test_frozen_output_embedding_is_a_buffer_and_gets_no_gradient():
    head = SampledSoftmaxOutputLayer(
        make_vocab(20), input_dim=6, num_samples=5, embedding_dim=3, trainable_embedding=False
    )
    assert "weight" not in dict(head.named_parameters())
    assert set(dict(head.named_parameters())) == {"bias", "projection.weight", "projection.bias"}
    assert "weight" in head.state_dict()  # random, so saved
    hidden, targets = toy_problem(20, 6, 5)
    head(hidden, target_ids=targets)["loss"].sum().backward()
    assert head.projection.weight.grad.abs().sum() > 0


def test_fixed_head_uses_the_fasttext_vectors_of_the_vocabulary():
    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    path = os.environ["ELMOC_TEST_FASTTEXT"]
    vectors = FastTextVectors.from_path(path)
    vocab = Vocabulary()
    vocab.add_tokens_to_namespace(["<S>", "</S>", "the", "bank", "unseenword"], "targets")
    head = LanguageModelOutputLayer.from_params(
        Params(
            {
                "type": "elmoc_sampled_softmax",
                "input_dim": 6,
                "num_samples": 3,
                "pretrained_file": path,
                "trainable_embedding": False,
            }
        ),
        vocab=vocab,
    )
    assert head.weight.shape == (7, vectors.dim)
    assert not head.weight.requires_grad
    assert "weight" not in head.state_dict()  # rebuilt from the file
    assert torch.equal(head.weight[0], torch.zeros(vectors.dim))  # padding
    for token in ("the", "bank", "unseenword"):
        index = vocab.get_token_index(token, "targets")
        assert np.allclose(head.weight[index].numpy(), vectors.word_vector(token), atol=1e-6)
    eos = vectors.word_vector(vectors.eos_word)
    assert np.allclose(head.weight[vocab.get_token_index("<S>", "targets")].numpy(), eos)
    assert head.projection.weight.shape == (vectors.dim, 6)
