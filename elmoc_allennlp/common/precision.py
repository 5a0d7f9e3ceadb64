"""
The precision a frozen biLM runs in at inference (issue #51): `float32` (as trained), `bfloat16`
(where the device computes it natively; else float32, with one line saying so) or `int8` (dynamic
quantization of the linear maps, CPU only). The one place that knows what each means, whether a
device has native bfloat16, and how an encoder is prepared for it. (Mixed-precision training,
which asks the same of a device: `elmoc_allennlp.training.mixed_precision`.)

An encoder is prepared through its `inference_input_dtype` attribute (`LayerNormLstm`'s): set, the
encoder calls its linear maps as modules, which this module makes quantized or bfloat16 ones; the
recurrence's gates, cells, states and LayerNorms stay float32, and so do its outputs.
"""

import copy
import difflib
import functools
import logging
import os
import warnings
from typing import FrozenSet, List, Optional, Sequence, Tuple, Union

import torch

from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "int8")
# Set (to anything but "" or "0"), bfloat16 runs on a device without native units: its numerics
# without its speed, for quality studies on any CPU (examples/mixed_precision).
EMULATE_BFLOAT16 = "ELMOC_EMULATE_BFLOAT16"
# /proc/cpuinfo flags of native bfloat16 arithmetic: AVX-512 BF16 and AMX (x86), BF16 (aarch64).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
# The flags a benchmark reports: what float32, bfloat16 and int8 matrix products run on.
REPORTED_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def check_dtype(dtype: str, option: str, choices: Sequence[str] = DTYPES) -> None:
    """One of `choices`, or an error naming `option` and the nearest name."""
    if dtype in choices:
        return
    close = difflib.get_close_matches(str(dtype), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigurationError(f"{option} must be one of {list(choices)}, got {dtype!r}{hint}")


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
    """Whether `device` computes bfloat16 natively, and what says so (or what it lacks); `True`
    on any device where `ELMOC_EMULATE_BFLOAT16` is set."""
    device = torch.device(device)
    if os.environ.get(EMULATE_BFLOAT16, "") not in ("", "0"):
        return True, f"{EMULATE_BFLOAT16} is set: bfloat16's numerics, not its speed"
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


def _linear_maps(encoder: torch.nn.Module) -> List[Tuple[str, torch.nn.Linear]]:
    return [
        (name, module)
        for name, module in encoder.named_modules()
        if isinstance(module, torch.nn.Linear)
    ]


def prepared_copy(module: torch.nn.Linear, dtype: str) -> torch.nn.Module:
    """A float32 linear map's copy for `dtype`: quantized (`int8`) or with bfloat16 weights."""
    if dtype == "bfloat16":
        return copy.deepcopy(module).to(torch.bfloat16)
    from torch.ao.quantization import quantize_dynamic

    holder = torch.nn.Module()
    holder.map = copy.deepcopy(module)
    with warnings.catch_warnings():
        # torch 2.13 deprecates the quantized tensors quantize_dynamic makes: not the user's to act on.
        warnings.filterwarnings(
            "ignore", message=r"torch\.quantize_per_tensor", category=UserWarning
        )
        quantize_dynamic(holder, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    return holder.map


def _set_map(encoder: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(encoder.get_submodule(parent) if parent else encoder, child, module)


def _save_float_maps(encoder, state_dict, prefix, local_metadata) -> None:
    """A prepared encoder's state: its float32 maps' weights in place of the prepared maps' state."""
    for name, original in encoder._float32_maps.items():
        inner = f"{prefix}{name}."
        for key in [key for key in state_dict if key.startswith(inner)]:
            del state_dict[key]
        for tensor_name, parameter in original._parameters.items():
            if parameter is not None:
                state_dict[inner + tensor_name] = parameter


def _load_float_maps(
    encoder, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
) -> None:
    """Loads float32 maps' weights into a prepared encoder's originals, and prepares them again."""
    for name, original in encoder._float32_maps.items():
        inner = f"{prefix}{name}."
        keys = [key for key in state_dict if key.startswith(inner)]
        incoming = {key[len(inner) :]: state_dict.pop(key) for key in keys}
        with torch.no_grad():
            for tensor_name, parameter in original._parameters.items():
                if parameter is None:
                    continue
                if tensor_name in incoming:
                    parameter.copy_(incoming.pop(tensor_name))
                else:
                    missing_keys.append(inner + tensor_name)
        prepared = prepared_copy(original, encoder._prepared_dtype)
        _set_map(encoder, name, prepared)
        # What the prepared map loads (its own state), and what was not its (reported as usual).
        state_dict.update(prepared.state_dict(prefix=inner, keep_vars=True))
        state_dict.update({inner + key: value for key, value in incoming.items()})


def prepare_encoder(
    encoder: torch.nn.Module, dtype: str, device: Union[str, torch.device], option: str = "dtype"
) -> str:
    """
    Prepares a frozen biLM's encoder (on `device`) to run at `dtype`, in place, once; returns the
    precision it runs at. `bfloat16` without native units: float32, with one log line saying so
    (the encoder is left as it is). Otherwise each `torch.nn.Linear` map is replaced by its
    prepared copy (`prepared_copy`); the float32 originals are kept, and the encoder's state (its
    `state_dict`, what it loads, the layer cache's fingerprint) stays theirs: a prepared biLM
    saves and loads as the float32 one it was prepared from.
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
    if getattr(encoder, "_prepared_dtype", None) is not None:
        raise ConfigurationError(
            f"{option}: the biLM is already prepared for {encoder._prepared_dtype}"
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
    originals = dict(_linear_maps(encoder))
    for name, module in originals.items():
        _set_map(encoder, name, prepared_copy(module, dtype))
    # Not registered as modules: neither parameters nor state of their own (see the hooks).
    encoder.__dict__["_float32_maps"] = originals
    encoder._prepared_dtype = dtype
    encoder._register_state_dict_hook(_save_float_maps)
    encoder._register_load_state_dict_pre_hook(_load_float_maps, with_module=True)
    if dtype == "bfloat16":
        encoder.inference_input_dtype = torch.bfloat16
        logger.info("%s bfloat16: the biLM's linear maps run in bfloat16 (%s)", option, evidence)
    else:
        encoder.inference_input_dtype = torch.float32
        logger.info(
            "%s int8: the biLM's linear maps are dynamically quantized (torch quantized engine %s)",
            option,
            torch.backends.quantized.engine,
        )
    return dtype


def at_least_float32(tensor: torch.Tensor) -> torch.Tensor:
    """A bfloat16 or float16 tensor (an autocast product) in float32, any other as it is: what a
    loss is computed from in mixed-precision training."""
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def is_quantized(module: torch.nn.Module) -> bool:
    """Whether `module` is a dynamically quantized linear map (as `prepare_encoder` makes them)."""
    return hasattr(module, "_packed_params")


def bias_of(module: torch.nn.Module) -> Optional[torch.Tensor]:
    """A linear map's bias (a method of a quantized one), as float32, or `None`."""
    bias = module.bias
    bias = bias() if callable(bias) else bias
    return None if bias is None else bias.float()
