"""
Mixed-precision training (issue #51): the `precision` option of the plugin's trainers
(`elmoc_gradient_descent`, `elmoc_checked_gradient_descent`).

`"bfloat16"` runs each batch's forward pass (the model and its loss, in training and validation)
under `torch.autocast` to bfloat16 on the trainer's device where it has native bfloat16 (CPUs with
AVX-512 BF16 or AMX, CUDA GPUs from Ampere on); elsewhere training runs in float32, with one line
saying so. The weights and the optimizer stay float32 (the master weights); the backward pass runs
outside autocast, as allennlp's. What runs in bfloat16 and what stays float32 is decided where the
computation is: the ELMo-C LSTM's matrix products in bfloat16, its cells, states and LayerNorms in
float32 (`modules/seq2seq_encoders/lstm_recurrence.py`); the output layers' losses in float32.
allennlp's own `use_amp` (float16 autocast with loss scaling, CUDA only) is the other mixed
precision; the two are not combined.
"""

import contextlib
import inspect
import logging
from typing import Callable, ContextManager, Optional

import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.precision import check_dtype, native_bfloat16

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "bfloat16")
OPTION = "trainer.precision"


def training_autocast_dtype(
    precision: str, device: torch.device, use_amp: bool
) -> Optional[torch.dtype]:
    """The dtype a trainer's forward passes autocast to for `precision` on `device` (`None`:
    float32), after checking the option; logs the precision training runs in."""
    check_dtype(precision, OPTION, PRECISIONS)
    if precision == "float32":
        return None
    if use_amp:
        raise ConfigurationError(
            f"{OPTION} {precision} and trainer.use_amp are two mixed precisions (use_amp is "
            "allennlp's float16 autocast with loss scaling, CUDA only): set one of them"
        )
    native, evidence = native_bfloat16(device)
    if not native:
        logger.warning(
            "%s bfloat16: %s, so training runs in float32 (the same results as float32)",
            OPTION,
            evidence,
        )
        return None
    logger.info(
        "%s bfloat16: forward passes autocast to bfloat16 on %s (%s); weights, optimizer, "
        "LayerNorm statistics and losses in float32",
        OPTION,
        device,
        evidence,
    )
    return torch.bfloat16


def autocast(device: torch.device, dtype: Optional[torch.dtype]) -> ContextManager:
    """`torch.autocast` on `device`'s type to `dtype`, or a no-op for `None`."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def with_precision_parameter(method: Callable) -> inspect.Signature:
    """`method`'s signature (allennlp's `from_partial_objects`) with `precision` added before
    its `**kwargs`, for `from_params` to read the option from a config."""
    signature = inspect.signature(method)
    parameters = list(signature.parameters.values())
    position = next(
        (i for i, p in enumerate(parameters) if p.kind == p.VAR_KEYWORD), len(parameters)
    )
    precision = inspect.Parameter(
        "precision", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="float32", annotation=str
    )
    return signature.replace(parameters=[*parameters[:position], precision, *parameters[position:]])
