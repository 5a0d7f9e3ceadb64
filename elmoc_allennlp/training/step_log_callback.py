import json
import os
import time
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from allennlp.training.callbacks.callback import TrainerCallback


@TrainerCallback.register("elmoc_step_log")
class StepLogCallback(TrainerCallback):
    """
    Appends one JSON line per training step to `SERIALIZATION_DIR/step_log_w{RANK}.jsonl`:
    `epoch`, `batch` (1-based in the epoch), `step` (since training began), the worker's `loss`,
    `instances`, `tokens` and `time`; an `"event": "start"` line marks every (re)start.

    Registered as a `TrainerCallback` with name "elmoc_step_log".

    # Parameters

    serialization_dir : `str`
        The run's folder, where the step logs are written (given by `allennlp train`, not in the
        config).
    """

    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        self._rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self._path = os.path.join(serialization_dir, f"step_log_w{self._rank}.jsonl")
        self._step = 0

    def _write(self, record: Dict[str, Any]) -> None:
        # One write of a whole line: a kill leaves at most a partial last line.
        with open(self._path, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        self._write({"event": "start", "rank": self._rank, "step": self._step, "time": time.time()})

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
        loss = sum(float(output["loss"].detach()) for output in batch_outputs) / max(
            len(batch_outputs), 1
        )
        instances = tokens = 0
        for batch in batch_inputs:
            mask = _first_mask(batch)
            if mask is not None:
                instances += int(mask.size(0))
                tokens += int(mask.sum())
        record = dict(
            epoch=epoch,
            batch=batch_number,
            step=self._step,
            loss=loss,
            instances=instances,
            tokens=tokens,
        )
        self._write({**record, "time": time.time()})

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
