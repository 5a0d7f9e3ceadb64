import json
import logging
import os
import time
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from allennlp.training.callbacks.callback import TrainerCallback

logger = logging.getLogger(__name__)


class _AllReduceCounter:
    """State of the counting DDP communication hook: bytes and buckets reduced so far."""

    def __init__(self) -> None:
        self.bytes = 0
        self.buckets = 0


def _counting_allreduce_hook(
    state: _AllReduceCounter, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """
    DDP's default all-reduce (sum, then divide by the world size), counting the bytes of each
    gradient bucket it sends.
    """
    buffer = bucket.buffer()
    state.bytes += buffer.numel() * buffer.element_size()
    state.buckets += 1
    world_size = dist.get_world_size()
    future = dist.all_reduce(buffer, async_op=True).get_future()

    def divide(fut):
        return fut.value()[0].div_(world_size)

    return future.then(divide)


@TrainerCallback.register("elmoc_step_log")
class StepLogCallback(TrainerCallback):
    """
    Appends one JSON line per training step to `SERIALIZATION_DIR/step_log_w{RANK}.jsonl`, for
    auditing long and distributed runs: `epoch`, `batch` (1-based within the epoch), `step`
    (optimizer steps since the start of training), the worker's `loss` for that step, its
    `instances` (sentences in the batch) and `tokens`, the `time`, and in distributed training
    `allreduce_bytes`: the gradient bytes that DDP all-reduced for this step (counted by a DDP
    communication hook that otherwise behaves as DDP's default all-reduce). A new line is also
    written when training (re)starts (`"event": "start"`), so a run resumed with
    `allennlp train --recover` shows which steps were done again.

    Registered as a `TrainerCallback` with name "elmoc_step_log".

    # Parameters

    serialization_dir : `str`
    count_allreduce_bytes : `bool`, optional (default = `True`)
        Register the counting communication hook in distributed training. The DDP model must not
        have another communication hook.
    """

    def __init__(self, serialization_dir: str, count_allreduce_bytes: bool = True) -> None:
        super().__init__(serialization_dir)
        self._count_allreduce_bytes = count_allreduce_bytes
        self._counter: Optional[_AllReduceCounter] = None
        self._rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self._path = os.path.join(serialization_dir, f"step_log_w{self._rank}.jsonl")
        self._step = 0
        self._bytes_at_last_step = 0

    def _write(self, record: Dict[str, Any]) -> None:
        # One write() of a whole line in append mode: a kill leaves at most a partial last line,
        # which `read_step_log` ignores.
        with open(self._path, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        wrapped = getattr(trainer, "_ddp_wrapped_model", None)
        if self._count_allreduce_bytes and wrapped is not None:
            ddp = wrapped.model
            if isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
                self._counter = _AllReduceCounter()
                ddp.register_comm_hook(self._counter, _counting_allreduce_hook)
        self._write(
            {
                "event": "start",
                "rank": self._rank,
                "step": self._step,
                "trainable_parameter_bytes": sum(
                    p.numel() * p.element_size()
                    for p in trainer.model.parameters()
                    if p.requires_grad
                ),
                "time": time.time(),
            }
        )

    def on_batch(
        self,
        trainer,
        batch_inputs: List[Dict[str, Any]],
        batch_outputs: List[Dict[str, Any]],
        batch_metrics: Dict[str, Any],
        epoch: int,
        batch_number: int,
        is_training: bool,
        is_primary: bool = True,
        batch_grad_norm: Optional[float] = None,
        **kwargs,
    ) -> None:
        if not is_training:
            return
        self._step += 1
        loss = sum(float(output["loss"].detach()) for output in batch_outputs) / max(len(batch_outputs), 1)
        instances = tokens = 0
        for batch in batch_inputs:
            mask = _first_mask(batch)
            if mask is not None:
                instances += int(mask.size(0))
                tokens += int(mask.sum())
        record: Dict[str, Any] = {
            "epoch": epoch,
            "batch": batch_number,
            "step": self._step,
            "loss": loss,
            "instances": instances,
            "tokens": tokens,
            "time": time.time(),
        }
        if self._counter is not None:
            record["allreduce_bytes"] = self._counter.bytes - self._bytes_at_last_step
            self._bytes_at_last_step = self._counter.bytes
        self._write(record)

    def state_dict(self) -> Dict[str, Any]:
        return {"step": self._step}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self._step = state_dict.get("step", 0)


def _first_mask(batch: Dict[str, Any]) -> Optional[torch.Tensor]:
    tokens = batch.get("tokens")
    if not isinstance(tokens, dict):
        return None
    for indexer_output in tokens.values():
        if isinstance(indexer_output, dict) and "mask" in indexer_output:
            return indexer_output["mask"]
    return None


def read_step_log(path: str) -> List[Dict[str, Any]]:
    """The records of a step log, skipping a last line cut short by a kill."""
    records = []
    with open(path, encoding="utf-8") as log:
        for line in log:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
