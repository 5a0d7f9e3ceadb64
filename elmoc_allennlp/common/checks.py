"""One-line checks of config values; each raises a `ConfigurationError` naming the key."""

import difflib
from typing import Any, Iterable, Optional, Sequence

import torch

from allennlp.common.checks import ConfigurationError


def check_positive(value: Optional[float], key: str, allow_none: bool = False) -> None:
    """`value > 0` (or `None`, if `allow_none`)."""
    if (value is None and not allow_none) or (value is not None and not value > 0):
        or_null = " (or null)" if allow_none else ""
        raise ConfigurationError(f"{key} must be positive{or_null}, got {value!r}")


def check_positive_int(value: Any, key: str, allow_none: bool = False) -> None:
    """An `int` (not a `bool`) `>= 1` (or `None`, if `allow_none`)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{key} must be a positive integer, got {value!r}")


def check_non_negative(value: float, key: str) -> None:
    if not value >= 0:
        raise ConfigurationError(f"{key} must be non-negative, got {value!r}")


def check_probability(value: float, key: str) -> None:
    """`0 <= value < 1`, e.g. a dropout rate."""
    if not 0.0 <= value < 1.0:
        raise ConfigurationError(f"{key} must be in [0, 1), got {value!r}")


def check_one_of(value: Any, choices: Sequence[Any], key: str) -> None:
    if value not in choices:
        raise ConfigurationError(f"{key} must be one of {list(choices)}, got {value!r}")


def check_cuda_device(cuda_device: int, option: str) -> None:
    """A GPU index this machine has (or -1, the CPU); the one check of every entry point's GPU flag."""
    available = torch.cuda.device_count()
    if cuda_device >= available:
        raise ConfigurationError(
            f"{option} {cuda_device}: this machine has {available} CUDA device(s); use -1 for the CPU"
        )


def check_known_keys(
    keys: Iterable[str], known: Iterable[str], owner: str, prefix: str = ""
) -> None:
    """A `ConfigurationError` from `owner` naming each key not in `known` and the known one it probably meant."""
    known = sorted(set(known))
    unknown = [key for key in keys if key not in known]
    if not unknown:
        return
    described = []
    for key in unknown:
        nearest = difflib.get_close_matches(key, known, n=1, cutoff=0.0)
        hint = f' (did you mean "{prefix}{nearest[0]}"?)' if nearest else ""
        described.append(f'"{prefix}{key}"{hint}')
    plural = "s" if len(unknown) > 1 else ""
    raise ConfigurationError(f"{owner}: unknown key{plural} {', '.join(described)}")
