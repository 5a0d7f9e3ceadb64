"""allennlp's `reduce_on_plateau`, as re-registered for current PyTorch."""

import torch

from allennlp.common import Params
from allennlp.training.learning_rate_schedulers import LearningRateScheduler

from elmoc_allennlp.compat.reduce_on_plateau import (
    _ACCEPTS_VERBOSE,
    ReduceOnPlateauLearningRateScheduler,
)


def test_reduce_on_plateau_builds_from_a_recipe_config_and_halves_the_rate():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=0.4)
    scheduler = LearningRateScheduler.from_params(
        optimizer=optimizer,
        params=Params(
            {
                "type": "reduce_on_plateau",
                "factor": 0.5,
                "mode": "max",
                "patience": 0,
                "verbose": True,
            }
        ),
    )
    # replaced only where PyTorch removed `verbose` (torch 1.12, the published environment, has it)
    assert isinstance(scheduler, ReduceOnPlateauLearningRateScheduler) != _ACCEPTS_VERBOSE
    scheduler.step(0.8)  # best so far
    assert optimizer.param_groups[0]["lr"] == 0.4
    scheduler.step(0.7)  # worse, patience 0: halve
    assert optimizer.param_groups[0]["lr"] == 0.2
    scheduler.step(0.9)
    assert optimizer.param_groups[0]["lr"] == 0.2
