"""What the tests of the softmax-family output layers share: a padded target vocabulary and a
learnable toy problem."""

import torch

from allennlp.data import Vocabulary


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
