"""The biLM's metrics, summed on the device (a training step never waits for it), in bounded memory."""

from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F

from allennlp.nn import util
from allennlp.training.metrics import Metric

# Scores held at once (16 MiB in float32), for any batch (ours).
RETRIEVAL_SCORE_BUDGET = 2**22


def _first_occurrences(targets: torch.Tensor) -> torch.Tensor:
    """
    The positions of `targets`' rows whose bits no earlier row has, in order (bits: `-0.0` and `0.0`
    stay two candidates, and torch 1.12's `torch.unique(dim=0)` has no float16).
    """
    rows = targets.reshape(targets.size(0), -1).contiguous()
    as_integers = {2: torch.int16, 4: torch.int32, 8: torch.int64}[rows.element_size()]
    _, inverse, counts = torch.unique(
        rows.view(as_integers), dim=0, return_inverse=True, return_counts=True
    )
    # Each group's rows, in position order, start at the group's offset: that row is its first.
    by_group = torch.sort(inverse, stable=True).indices
    return by_group[counts.cumsum(0) - counts].sort().values


def retrieval_accuracy(
    predictions: torch.Tensor, gold: torch.Tensor, targets: torch.Tensor, deduplicate: bool = True
) -> torch.Tensor:
    """
    The fraction of `predictions` `(N, dim)` whose nearest of `targets` `(num_targets, dim)` (cosine;
    ties: the earliest) equals their `gold` `(N, dim)` by value, `RETRIEVAL_SCORE_BUDGET` scores at a
    time (docs/trust_and_safety.md). `deduplicate` scores each distinct target once when over budget
    (a host sync: training passes `False`). Returns a 0-dim float32 tensor on the inputs' device.
    """
    num_predictions = predictions.size(0)
    candidates = targets
    if deduplicate and num_predictions * targets.size(0) > RETRIEVAL_SCORE_BUDGET:
        candidates = targets[_first_occurrences(targets)]
    normalized = F.normalize(candidates, dim=-1).t()
    step = max(1, RETRIEVAL_SCORE_BUDGET // max(candidates.size(0), 1))
    hits = predictions.new_zeros((), dtype=torch.long)
    for start in range(0, num_predictions, step):
        scores = F.normalize(predictions[start : start + step], dim=-1) @ normalized
        nearest = candidates[scores.argmax(dim=-1)]
        hits += (nearest == gold[start : start + step]).all(dim=-1).sum()
    # As `.float().mean()`: the count (exact in float32 below 2^24) over the number (NaN for none), in float32.
    return hits.float() / num_predictions


class ConstantBaseline(Metric):
    """The cosine loss of the best constant prediction, `1 - |mean of the unit targets|`, summed on the
    device (adding targets never syncs); `get_metric` all-reduces."""

    def __init__(self, dim: int) -> None:
        self._dim = dim
        self._sums: Optional[torch.Tensor] = None

    def __call__(self, targets: torch.Tensor) -> None:  # type: ignore[override]
        """`targets`: `(num_targets, dim)`; a zero vector counts as a target no direction fits."""
        with torch.no_grad():
            units = F.normalize(targets.detach().to(torch.float64), dim=-1, eps=1e-12)
            # The unit targets' sum, then their count, in one tensor (one all-reduce).
            sums = torch.cat([units.sum(0), units.new_full((1,), float(targets.size(0)))])
            self._sums = sums if self._sums is None else self._sums + sums

    def get_metric(self, reset: bool = False) -> float:
        sums = torch.zeros(self._dim + 1, dtype=torch.float64) if self._sums is None else self._sums
        if util.is_distributed():
            nccl = torch.distributed.get_backend() == "nccl"
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else "cpu"
            sums = sums.to(device, copy=True)  # all_reduce works in place: not on the running sums
            torch.distributed.all_reduce(sums)
        sums = sums.cpu()
        total, count = sums[:-1], float(sums[-1])
        if reset:
            self.reset()
        return 1.0 - float(total.norm()) / count if count > 0 else 0.0

    def reset(self) -> None:
        self._sums = None


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


class BilmMetrics:
    """The metrics of `BidirectionalLanguageModel`; `get_metrics` reads the device only on reset."""

    training: bool
    trains: Callable[[str], bool]

    def _init_metrics(self, target_dim: Optional[int], retrieval_sample_size: int) -> None:
        """`target_dim`: the continuous head's output dimension (`None`: a softmax-family head)."""
        self._retrieval_sample_size = retrieval_sample_size
        self._losses = {direction: DeviceAverage() for direction in ("forward", "backward")}
        self._cosine_similarity = DeviceAverage()
        self._retrieval_accuracy = DeviceAverage()
        self._constant_baselines: Dict[str, ConstantBaseline] = {}
        if target_dim is not None:
            self._constant_baselines = {
                direction: ConstantBaseline(target_dim) for direction in self._losses
            }

    def _update_vector_metrics(
        self,
        direction: str,
        predictions: torch.Tensor,
        targets: torch.Tensor,
        pair_mask: torch.BoolTensor,
        predict_at: slice,
        output_dict: Dict[str, torch.Tensor],
    ) -> None:
        with torch.no_grad():
            cosine = F.cosine_similarity(predictions, targets, dim=-1, eps=1e-8)
            # cosine's dtype (float32 under autocast); the slice-view scatter needs no host sync.
            per_position = cosine.new_zeros(pair_mask.size(0), pair_mask.size(1) + 1)
            per_position[:, predict_at].masked_scatter_(pair_mask, cosine)
            output_dict[f"{direction}_cosine"] = per_position
            if cosine.numel() == 0:
                return
            self._cosine_similarity(cosine.mean())
            self._retrieval_accuracy(self._retrieval_accuracy_of(predictions, targets))
            self._constant_baselines[direction](targets)

    def _retrieval_accuracy_of(
        self, predictions: torch.Tensor, targets: torch.Tensor
    ) -> torch.Tensor:
        """The fraction of predictions nearest to their own target of the batch (compared by value)."""
        gold = targets
        if self.training and predictions.size(0) > self._retrieval_sample_size:
            chosen = torch.randperm(predictions.size(0), device=predictions.device)
            chosen = chosen[: self._retrieval_sample_size]
            predictions, gold = predictions[chosen], targets[chosen]
        # Training never deduplicates: `torch.unique` waits for the device (a host sync per step).
        return retrieval_accuracy(predictions, gold, targets, deduplicate=not self.training)

    def get_metrics(self, reset: bool = False) -> Dict[str, float]:
        if self.training and not reset:
            # Asked after every training step: reading the device sums there would sync.
            return {}
        directions = [direction for direction in ("forward", "backward") if self.trains(direction)]
        metrics = {
            f"{direction}_loss": self._losses[direction].get_metric(reset)
            for direction in directions
        }
        if self._constant_baselines:  # a continuous head
            metrics["cosine_similarity"] = self._cosine_similarity.get_metric(reset)
            metrics["retrieval_accuracy"] = self._retrieval_accuracy.get_metric(reset)
            baselines = [
                self._constant_baselines[direction].get_metric(reset) for direction in directions
            ]
            for direction, baseline in zip(directions, baselines):
                metrics[f"{direction}_constant_baseline_loss"] = baseline
            metrics["constant_baseline_loss"] = sum(baselines) / len(baselines)
        return metrics
