"""
The `elmoc_step_log` callback plus the trainable parameters' bytes and, per step,
`allreduce_bytes`: the gradient bytes DDP all-reduced, counted by a communication hook that
otherwise is DDP's default all-reduce. For `scale_allreduce_bytes.py`: `--include-package
benchmarks.allreduce_step_log` with the repository root on the path. The DDP model must have no
other communication hook.
"""

from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

from allennlp.training.callbacks.callback import TrainerCallback

from elmoc_allennlp.training.step_log_callback import StepLogCallback


class AllReduceCounter:
    """State of the counting hook: bytes and buckets reduced so far."""

    def __init__(self) -> None:
        self.bytes = 0
        self.buckets = 0


def counting_allreduce_hook(
    state: AllReduceCounter, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (sum, then divide by the world size), counting the bytes sent."""
    buffer = bucket.buffer()
    state.bytes += buffer.numel() * buffer.element_size()
    state.buckets += 1
    world_size = dist.get_world_size()
    future = dist.all_reduce(buffer, async_op=True).get_future()

    def divide(fut):
        return fut.value()[0].div_(world_size)

    return future.then(divide)


@TrainerCallback.register("elmoc_allreduce_step_log")
class AllReduceStepLogCallback(StepLogCallback):
    """
    `elmoc_step_log` whose start record also has the `trainable_parameter_bytes` and whose step
    records have `allreduce_bytes` in distributed training.
    """

    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        self._counter: Optional[AllReduceCounter] = None
        self._bytes_at_last_step = 0

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        wrapped = trainer._ddp_wrapped_model
        if wrapped is not None and isinstance(
            wrapped.model, torch.nn.parallel.DistributedDataParallel
        ):
            self._counter = AllReduceCounter()
            wrapped.model.register_comm_hook(self._counter, counting_allreduce_hook)
        super().on_start(trainer, is_primary=is_primary, **kwargs)

    def _write(self, record: Dict[str, Any]) -> None:
        if record.get("event") == "start":
            parameters = self.trainer.model.parameters()
            record["trainable_parameter_bytes"] = sum(
                p.numel() * p.element_size() for p in parameters if p.requires_grad
            )
        if self._counter is not None and "loss" in record:
            record["allreduce_bytes"] = self._counter.bytes - self._bytes_at_last_step
            self._bytes_at_last_step = self._counter.bytes
        super()._write(record)
