"""
The differences between the torch releases the plugin supports, one function each: torch 1.10-1.12
(the published allennlp 2.10.1 environment) and torch 2.x (the modern one). Code elsewhere in the
package calls these instead of branching on the torch version itself.
"""
from typing import Any, BinaryIO, Union

import torch


def load_tensors(source: Union[str, BinaryIO], map_location: Any = "cpu") -> Any:
    """
    Loads a file written by `torch.save` that may come from elsewhere (weights, checkpoints,
    training states): tensors and plain containers only, never an arbitrary pickled object, even
    when `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD` is set.
    """
    return torch.load(source, map_location=map_location, weights_only=True)


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast (`use_amp`) is on for `device_type`."""
    return torch.is_autocast_enabled(device_type)
