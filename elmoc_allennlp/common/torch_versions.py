"""
The differences between the torch releases the plugin supports, one function each: torch 1.10-1.12
(the published allennlp 2.10.1 environment, CPython 3.8-3.10) and torch 2.x (the modern one,
CPython 3.11-3.13). Code elsewhere in the package calls these instead of branching on the torch
version itself; each says why the releases differ.
"""
import collections
import functools
import pickle
from typing import Any, BinaryIO, Callable, ContextManager, Dict, Tuple, Union

import torch
from allennlp.common.checks import ConfigurationError

TORCH_VERSION: Tuple[int, int] = tuple(int(part) for part in torch.__version__.split(".")[:2])


def require_torch(version: Tuple[int, int], feature: str) -> None:
    """
    Refuses `feature` on a torch older than `version`, with a message naming both (instead of the
    `AttributeError`/`TypeError` the feature would raise half way through).
    """
    if TORCH_VERSION < version:
        raise ConfigurationError(
            f"{feature} needs torch >= {version[0]}.{version[1]}; this is torch {torch.__version__}."
        )


# --- Weights loading ------------------------------------------------------------------------------
# torch >= 1.13 has `torch.load(weights_only=True)`, an unpickler that builds tensors and plain
# containers only. torch 1.10-1.12 has no such argument, so there the same refusal comes from a
# pickle module whose unpickler resolves only the names that a file of tensors uses (what
# `weights_only` allows); anything else (`os.system`, a class of the file's choosing) raises
# `pickle.UnpicklingError`, as `weights_only` does.


@functools.lru_cache(maxsize=None)
def _allowed_globals() -> Dict[Tuple[str, str], Any]:
    allowed: Dict[Tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch", "Size"): torch.Size,
        ("torch", "device"): torch.device,
        ("torch", "Tensor"): torch.Tensor,
        ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
    }
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter",
                 "_rebuild_parameter_with_state", "_rebuild_sparse_tensor",
                 "_rebuild_sparse_csr_tensor", "_rebuild_qtensor", "_rebuild_meta_tensor_no_storage"):
        if hasattr(torch._utils, name):
            allowed[("torch._utils", name)] = getattr(torch._utils, name)
    for name in dir(torch):
        value = getattr(torch, name)
        if isinstance(value, torch.dtype):
            allowed[("torch", name)] = value
    allowed[("torch", "per_tensor_affine")] = torch.per_tensor_affine
    return allowed


class _TensorsOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        # torch's own loader resolves storage types (`torch.FloatStorage`, ...) before it gets here.
        allowed = _allowed_globals().get((module, name))
        if allowed is None:
            raise pickle.UnpicklingError(
                f"refused to load {module}.{name}: a weights file holds tensors and plain containers "
                f"only (torch {torch.__version__} has no weights_only loading; this is its equivalent)"
            )
        return allowed


class _TensorsOnlyPickle:
    """A `pickle_module` for `torch.load`: what it uses of `pickle`, with the restricted unpickler."""

    Unpickler = _TensorsOnlyUnpickler
    UnpicklingError = pickle.UnpicklingError

    @staticmethod
    def load(file: BinaryIO, **kwargs: Any) -> Any:
        return _TensorsOnlyUnpickler(file, **kwargs).load()


def load_tensors(source: Union[str, BinaryIO], map_location: Any = "cpu") -> Any:
    """
    Loads a file written by `torch.save` that may come from elsewhere (weights, checkpoints,
    training states): tensors and plain containers only, never an arbitrary pickled object, even
    when `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD` is set. A file with anything else raises
    `pickle.UnpicklingError` on every supported torch.
    """
    if TORCH_VERSION >= (1, 13):
        return torch.load(source, map_location=map_location, weights_only=True)
    return torch.load(source, map_location=map_location, pickle_module=_TensorsOnlyPickle)


# --- Autocast (`use_amp`) -------------------------------------------------------------------------


def autocast_enabled(device_type: str) -> bool:
    """
    Whether autocast (`use_amp`) is on for `device_type`. `torch.is_autocast_enabled(device_type)`
    takes the device from torch 2.4; before, one query per device (`is_autocast_enabled()` is CUDA).
    """
    if TORCH_VERSION >= (2, 4):
        return torch.is_autocast_enabled(device_type)
    if device_type == "cpu":
        return torch.is_autocast_cpu_enabled()
    return device_type == "cuda" and torch.is_autocast_enabled()


# torch 1.12's CPU bfloat16 autocast runs layer_norm in bfloat16 beside float32 weights, and its
# backward fails ("expected scalar type BFloat16 but found Float"); torch 2.x casts layer_norm to
# float32 there, as CUDA autocast (what `use_amp` uses) does on both. Only tests use CPU autocast.
CPU_BF16_AUTOCAST_LAYER_NORM_BACKWARD = TORCH_VERSION >= (2, 0)


# --- Functional calls (tests and gradient checks) ------------------------------------------------


def functional_call(module: torch.nn.Module, parameters: Dict[str, torch.Tensor], args: Any) -> Any:
    """
    `module(*args)` with `parameters` in place of its own. `torch.func` exists from torch 2.0; torch
    1.12 has the same function as `torch.nn.utils.stateless.functional_call`.
    """
    if TORCH_VERSION >= (2, 0):
        call: Callable[..., Any] = torch.func.functional_call
    else:
        call = torch.nn.utils.stateless.functional_call
    return call(module, parameters, args)


def load_trusted(source: Union[str, BinaryIO], map_location: Any = "cpu") -> Any:
    """
    `torch.load` of a file this process or its own tests wrote, with any pickled object in it. torch
    >= 2.6 defaults to `weights_only=True` and needs `weights_only=False` said; torch < 1.13 does not
    know the argument.
    """
    if TORCH_VERSION >= (1, 13):
        return torch.load(source, map_location=map_location, weights_only=False)
    return torch.load(source, map_location=map_location)


# --- Building without memory --------------------------------------------------------------------


def meta_device() -> ContextManager[Any]:
    """
    A context in which modules are built on the meta device (shapes, no storage): parameter counts of
    paper-size models without allocating them. `torch.device` is a context manager from torch 2.0;
    torch 1.12 has no default-device switch, so there this is refused.
    """
    require_torch((2, 0), "Building a model on the meta device (`with torch.device('meta')`)")
    return torch.device("meta")
