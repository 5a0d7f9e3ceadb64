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

from elmoc_allennlp.modules.output_layers.adaptive_softmax import AdaptiveSoftmaxOutputLayer
from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from elmoc_allennlp.modules.output_layers.sampled_softmax import LogUniformSampler, SampledSoftmaxOutputLayer
from elmoc_allennlp.modules.output_layers.softmax import SoftmaxOutputLayer


def make_vocab(num_words: int, namespace: str = "targets") -> Vocabulary:
    """A padded namespace of `num_words` entries (padding and OOV included)."""
    vocab = Vocabulary()
    vocab.add_tokens_to_namespace([f"w{i}" for i in range(num_words - 2)], namespace)
    assert vocab.get_vocab_size(namespace) == num_words
    return vocab


def toy_problem(num_words: int, input_dim: int, num_targets: int, seed: int = 0):
    """Hidden states that determine the target: a learnable toy 'corpus'."""
    generator = torch.Generator().manual_seed(seed)
    targets = torch.randint(1, num_words, (num_targets,), generator=generator)
    codes = torch.randn(num_words, input_dim, generator=generator)
    hidden = codes[targets] + 0.1 * torch.randn(num_targets, input_dim, generator=generator)
    return hidden, targets


def train_steps(head, hidden, targets, steps=60, lr=0.05):
    optimizer = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        head(hidden, target_ids=targets)["loss"].mean().backward()
        optimizer.step()


def eval_loss(head, hidden, targets) -> float:
    head.eval()
    with torch.no_grad():
        loss = head(hidden, target_ids=targets)["loss"].mean().item()
    head.train()
    return loss


# ----------------------------------------------------------------------------- full softmax


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


@pytest.mark.parametrize(
    "params",
    [
        {"type": "elmoc_softmax", "input_dim": 8},
        {"type": "elmoc_sampled_softmax", "input_dim": 8, "num_samples": 10},
        {"type": "elmoc_adaptive_softmax", "input_dim": 8, "cutoffs": [6, 20], "div_value": 2.0},
    ],
)
def test_loss_decreases_on_a_toy_corpus(params):
    torch.manual_seed(0)
    head = LanguageModelOutputLayer.from_params(Params(dict(params)), vocab=make_vocab(40))
    assert head.requires_target_ids
    hidden, targets = toy_problem(40, 8, 200)
    before = eval_loss(head, hidden, targets)
    train_steps(head, hidden, targets)
    after = eval_loss(head, hidden, targets)
    assert after < 0.5 * before, (before, after)


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
    expected = F.cross_entropy(hidden @ head.weight.t() + head.bias[:, 0], targets, reduction="none")
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
        head = SampledSoftmaxOutputLayer(make_vocab(num_words), input_dim=6, num_samples=num_samples)
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
    from elmoc_allennlp.common.fasttext_vectors import FastTextVectors

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


# ----------------------------------------------------------------------------- adaptive softmax


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
    head = AdaptiveSoftmaxOutputLayer(make_vocab(100), input_dim=16, cutoffs=[10, 40], div_value=4.0)
    # Head: 10 words + 2 clusters; tails: 16 -> 4 -> 30 words, 16 -> 1 -> 60 words.
    expected = 16 * 12 + (16 * 4 + 4 * 30) + (16 * 1 + 1 * 60)
    assert sum(p.numel() for p in head.parameters()) == expected


@pytest.mark.parametrize("cutoffs", [[], [30, 10], [10, 100], [0, 5]])
def test_adaptive_rejects_bad_cutoffs(cutoffs):
    with pytest.raises(ConfigurationError, match="cutoffs"):
        AdaptiveSoftmaxOutputLayer(make_vocab(100), input_dim=16, cutoffs=cutoffs)
