"""Every closed-vocabulary output layer built from its registered name learns a toy corpus."""

import pytest
import torch

from allennlp.common import Params

from elmoc_allennlp.modules.output_layers.output_layer import LanguageModelOutputLayer
from tests.modules.output_layers.conftest import eval_loss, make_vocab, toy_problem, train_steps


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
