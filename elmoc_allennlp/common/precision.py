"""
The precision a frozen biLM runs in at inference (issue #51): `float32` (as trained), `bfloat16`
(where the device computes it natively; else float32, with one line saying so) or `int8` (dynamic
quantization of the linear maps, CPU only). The one place that knows what each means, whether a
device has native bfloat16, and how an encoder is prepared for it.

An encoder is prepared through its `inference_input_dtype` attribute (`LayerNormLstm`'s): set, the
encoder calls its linear maps as modules, which this module makes quantized or bfloat16 ones; the
recurrence's gates, cells, states and LayerNorms stay float32, and so do its outputs.
"""

import difflib
import functools
import logging
import warnings
from typing import FrozenSet, Optional, Tuple, Union

import torch

from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "int8")
# /proc/cpuinfo flags of native bfloat16 arithmetic: AVX-512 BF16 and AMX (x86), BF16 (aarch64).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
# The flags a benchmark reports: what float32, bfloat16 and int8 matrix products run on.
REPORTED_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def check_dtype(dtype: str, option: str) -> None:
    """One of `DTYPES`, or an error naming `option` and the nearest name."""
    if dtype in DTYPES:
        return
    close = difflib.get_close_matches(str(dtype), DTYPES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigurationError(f"{option} must be one of {list(DTYPES)}, got {dtype!r}{hint}")


@functools.lru_cache(maxsize=None)
def cpu_flags() -> FrozenSet[str]:
    """This CPU's feature flags (Linux `/proc/cpuinfo`; empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):  # x86, aarch64
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def torch_cpu_capability() -> Optional[str]:
    """torch's CPU capability (`"AVX2"`, `"AVX512"`, ...), where this torch reports it (2.x)."""
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return capability() if capability is not None else None


def native_bfloat16(device: Union[str, torch.device]) -> Tuple[bool, str]:
    """Whether `device` computes bfloat16 natively, and what says so (or what it lacks)."""
    device = torch.device(device)
    if device.type == "cuda":
        supported = torch.cuda.is_bf16_supported()
        return supported, f"torch.cuda.is_bf16_supported() is {supported}"
    if device.type != "cpu":
        return False, f"no bfloat16 detection for device type {device.type!r}"
    flags = cpu_flags()
    found = [flag for flag in BFLOAT16_CPU_FLAGS if flag in flags]
    if found:
        return True, f"CPU flags {' '.join(found)}"
    capability = torch_cpu_capability()
    if capability is not None and any(unit in capability.upper() for unit in ("BF16", "AMX")):
        return True, f"torch CPU capability {capability}"
    where = "/proc/cpuinfo flags" if flags else "no /proc/cpuinfo flags to read"
    seen = f"; torch CPU capability {capability}" if capability is not None else ""
    return False, f"the CPU has no {', '.join(BFLOAT16_CPU_FLAGS[:2])} ({where}{seen})"


def check_device(dtype: str, device: Union[str, torch.device], option: str) -> None:
    """`int8` runs on the CPU only: an error naming `option` on another device."""
    device = torch.device(device)
    if dtype == "int8" and device.type != "cpu":
        raise ConfigurationError(
            f"{option} int8 (torch's dynamic quantization) runs on the CPU only, and this biLM "
            f"runs on {device}: use {option} bfloat16 (or float32) there, or the CPU"
        )


def _linear_maps(encoder: torch.nn.Module):
    return [
        (name, module)
        for name, module in encoder.named_modules()
        if isinstance(module, torch.nn.Linear)
    ]


def prepare_encoder(
    encoder: torch.nn.Module, dtype: str, device: Union[str, torch.device], option: str = "dtype"
) -> str:
    """
    Prepares a frozen biLM's encoder (on `device`) to run at `dtype`, in place, once; returns the
    precision it runs at. `bfloat16` without native units: float32, with one log line saying so
    (the encoder is left as it is); `int8`: its `torch.nn.Linear` maps quantized (qint8).
    """
    check_dtype(dtype, option)
    check_device(dtype, device, option)
    if dtype == "float32":
        return dtype
    if not hasattr(encoder, "inference_input_dtype"):
        raise ConfigurationError(
            f"{option} {dtype}: the biLM's contextualizer ({type(encoder).__name__}) runs in "
            "float32 only; use float32"
        )
    if dtype == "bfloat16":
        native, evidence = native_bfloat16(device)
        if not native:
            logger.warning(
                "%s bfloat16: %s, so the biLM runs in float32 (the same results as float32)",
                option,
                evidence,
            )
            return "float32"
        for _, module in _linear_maps(encoder):
            module.to(torch.bfloat16)
        encoder.inference_input_dtype = torch.bfloat16
        logger.info("%s bfloat16: the biLM's linear maps run in bfloat16 (%s)", option, evidence)
        return dtype
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        # torch 2.13 deprecates the quantized tensors quantize_dynamic makes: not the user's to act on.
        warnings.filterwarnings(
            "ignore", message=r"torch\.quantize_per_tensor", category=UserWarning
        )
        quantize_dynamic(encoder, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    encoder.inference_input_dtype = torch.float32
    logger.info(
        "%s int8: the biLM's linear maps are dynamically quantized (torch quantized engine %s)",
        option,
        torch.backends.quantized.engine,
    )
    return dtype


def is_quantized(module: torch.nn.Module) -> bool:
    """Whether `module` is a dynamically quantized linear map (as `prepare_encoder` makes them)."""
    return hasattr(module, "_packed_params")


def bias_of(module: torch.nn.Module) -> Optional[torch.Tensor]:
    """A linear map's bias (a method of a quantized one), as float32, or `None`."""
    bias = module.bias
    bias = bias() if callable(bias) else bias
    return None if bias is None else bias.float()
