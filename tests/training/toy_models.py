from typing import Dict

import torch

from allennlp.data import Vocabulary
from allennlp.models import Model


class ToyRegression(Model):
    """One weight and one bias fitted to `y` by squared error: a model for trainer tests."""

    def __init__(self) -> None:
        super().__init__(Vocabulary())
        self.linear = torch.nn.Linear(1, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:  # type: ignore
        return {"loss": ((self.linear(x) - y) ** 2).mean()}
