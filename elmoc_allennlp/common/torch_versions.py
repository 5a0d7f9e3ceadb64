"""The differences between the supported torch releases (1.10-1.12 and 2.x), one function each."""

import collections
import functools
import pickle
from typing import Any, BinaryIO, ContextManager, Dict, Tuple, Union

import torch
from allennlp.common.checks import ConfigurationError

TORCH_VERSION: Tuple[int, int] = tuple(int(part) for part in torch.__version__.split(".")[:2])


def require_torch(version: Tuple[int, int], feature: str) -> None:
    """Refuses `feature` on a torch older than `version`, naming both."""
    if TORCH_VERSION < version:
        raise ConfigurationError(
            f"{feature} needs torch >= {version[0]}.{version[1]}; this is torch {torch.__version__}."
        )


@functools.lru_cache(maxsize=None)
def _allowed_globals() -> Dict[Tuple[str, str], Any]:
    allowed: Dict[Tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch", "Size"): torch.Size,
        ("torch", "device"): torch.device,
        ("torch", "Tensor"): torch.Tensor,
        ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
    }
    rebuilt = (
        "tensor tensor_v2 parameter parameter_with_state sparse_tensor sparse_csr_tensor qtensor"
    )
    for name in (f"_rebuild_{kind}" for kind in rebuilt.split() + ["meta_tensor_no_storage"]):
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
        allowed = _allowed_globals().get((module, name))
        if allowed is None:
            raise pickle.UnpicklingError(
                f"refused to load {module}.{name}: a weights file holds tensors and plain containers only"
            )
        return allowed


class _TensorsOnlyPickle:
    """
    A `pickle_module` for `torch.load` resolving only the names of tensor files (torch < 1.13: no
    `weights_only`).
    """

    Unpickler = _TensorsOnlyUnpickler
    UnpicklingError = pickle.UnpicklingError

    @staticmethod
    def load(file: BinaryIO, **kwargs: Any) -> Any:
        return _TensorsOnlyUnpickler(file, **kwargs).load()


def load_tensors(source: Union[str, BinaryIO], map_location: Any = "cpu") -> Any:
    """`torch.load` of tensors and plain containers only, even with `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`."""
    if TORCH_VERSION >= (1, 13):
        return torch.load(source, map_location=map_location, weights_only=True)
    return torch.load(source, map_location=map_location, pickle_module=_TensorsOnlyPickle)


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for `device_type` (a device argument from torch 2.4 on)."""
    if TORCH_VERSION >= (2, 4):
        return torch.is_autocast_enabled(device_type)
    if device_type == "cpu":
        return torch.is_autocast_cpu_enabled()
    return device_type == "cuda" and torch.is_autocast_enabled()


def autocast_dtype(device_type: str) -> torch.dtype:
    """The dtype autocast casts to on `device_type` (a device argument from torch 2.4 on)."""
    if TORCH_VERSION >= (2, 4):
        return torch.get_autocast_dtype(device_type)
    if device_type == "cpu":
        return torch.get_autocast_cpu_dtype()
    return torch.get_autocast_gpu_dtype()


# torch 1.12's CPU bfloat16 autocast runs layer_norm in bfloat16 (its backward fails), torch 2.x in
# float32; tests only.
CPU_BF16_AUTOCAST_LAYER_NORM_BACKWARD = TORCH_VERSION >= (2, 0)


def functional_call(module: torch.nn.Module, parameters: Dict[str, torch.Tensor], args: Any) -> Any:
    """`module(*args)` with `parameters` in place of its own (`torch.func` from torch 2.0)."""
    if TORCH_VERSION >= (2, 0):
        return torch.func.functional_call(module, parameters, args)
    return torch.nn.utils.stateless.functional_call(module, parameters, args)


def whole_storage(tensor: torch.Tensor) -> Tuple[int, torch.Tensor]:
    """The address of the storage `tensor` views, and all of it as one flat tensor of `tensor`'s dtype."""
    if TORCH_VERSION >= (2, 0):
        storage = tensor.untyped_storage()
        numel = storage.nbytes() // tensor.element_size()
    else:
        storage = tensor.storage()
        numel = storage.size()
    return storage.data_ptr(), tensor.as_strided((numel,), (1,), 0)


def load_trusted(source: Union[str, BinaryIO], map_location: Any = "cpu") -> Any:
    """`torch.load` of a file this process wrote, with any pickled object in it."""
    if TORCH_VERSION >= (1, 13):
        return torch.load(source, map_location=map_location, weights_only=False)
    return torch.load(source, map_location=map_location)


def meta_device() -> ContextManager[Any]:
    """A context building modules on the meta device (shapes, no storage); torch >= 2.0."""
    require_torch((2, 0), "Building a model on the meta device (`with torch.device('meta')`)")
    return torch.device("meta")
