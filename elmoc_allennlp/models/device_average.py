"""The biLM's metrics: averages kept on the device, so that a training step never waits for the GPU."""
from typing import Optional

import torch

from allennlp.nn import util
from allennlp.training.metrics import Metric


class DeviceAverage(Metric):
    """An `Average` summed on the device, so adding a value never syncs; `get_metric` all-reduces it."""

    def __init__(self) -> None:
        self._total: Optional[torch.Tensor] = None
        self._count = 0

    def __call__(self, value: torch.Tensor) -> None:  # type: ignore[override]
        value = value.detach().to(torch.float64)
        self._total = value if self._total is None else self._total + value
        self._count += 1

    def get_metric(self, reset: bool = False) -> float:
        total = 0.0 if self._total is None else float(self._total)
        sums = torch.tensor([total, float(self._count)], dtype=torch.float64)
        if util.is_distributed():
            nccl = torch.distributed.get_backend() == "nccl"
            sums = sums.to(torch.device("cuda", torch.cuda.current_device()) if nccl else "cpu")
            torch.distributed.all_reduce(sums)
        total, count = sums.tolist()
        if reset:
            self.reset()
        return total / count if count > 0 else 0.0

    def reset(self) -> None:
        self._total = None
        self._count = 0
