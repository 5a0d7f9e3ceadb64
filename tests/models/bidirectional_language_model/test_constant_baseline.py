"""The biLM's constant baseline: the cosine loss of the best constant prediction."""

import copy

import pytest
import torch
import torch.nn.functional as F

from elmoc_allennlp.models.bilm_metrics import ConstantBaseline


def test_constant_baseline_is_the_loss_of_predicting_the_mean_direction():
    torch.manual_seed(0)
    batches = [torch.randn(7, 5) + 1.0, torch.randn(3, 5, dtype=torch.float16) + 1.0]
    baseline = ConstantBaseline(5)
    for targets in batches:
        baseline(targets)
    targets = torch.cat([batch.double() for batch in batches])
    direction = F.normalize(targets, dim=-1).mean(0)
    plain = (1 - F.cosine_similarity(direction.expand_as(targets), targets, dim=-1)).mean().item()
    assert baseline.get_metric() == pytest.approx(plain, abs=1e-6)
    # It is the best constant: any other direction does worse.
    for other in torch.randn(20, 5, dtype=torch.float64):
        loss = (1 - F.cosine_similarity(other.expand_as(targets), targets, dim=-1)).mean().item()
        assert loss >= plain - 1e-9
    copied = copy.deepcopy(baseline)  # checkpoints may copy metrics
    assert baseline.get_metric(reset=True) == pytest.approx(plain, abs=1e-6)
    assert baseline.get_metric() == 0.0 and copied.get_metric() == pytest.approx(plain, abs=1e-6)
