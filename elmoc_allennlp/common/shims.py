"""`install_shim`, the one way the plugin replaces an allennlp object, once per process and shim;
`installer` builds a shim module's `TARGETS` and `install()` from its guards."""

import functools
import inspect
import pkgutil
from typing import Any, Callable, Dict, Optional, Tuple

# (owner, attribute, shim) -> the object the shim replaced.
_ORIGINALS: Dict[Tuple[Any, str, str], Any] = {}


def install_shim(
    owner: Any, name: str, make: Callable[[Callable], Callable], shim: Optional[Callable] = None
) -> None:
    """Replaces `owner.name` by `make(original)`, once per process and `shim` (default `make`); a
    classmethod stays one (`make` gets and returns its function)."""
    shim = shim or make
    key = (owner, name, f"{shim.__module__}.{shim.__qualname__}")
    if key in _ORIGINALS:
        return
    is_classmethod = isinstance(owner, type) and isinstance(
        inspect.getattr_static(owner, name), classmethod
    )
    original = getattr(owner, name).__func__ if is_classmethod else getattr(owner, name)
    replacement = make(original)
    _ORIGINALS[key] = original
    setattr(owner, name, classmethod(replacement) if is_classmethod else replacement)


def _wrapping(guard: Callable) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def replacement(*args, **kwargs):
            return guard(original, *args, **kwargs)

        return replacement

    return make


def installer(guards: Dict[str, Callable]) -> Tuple[Tuple[str, ...], Callable[[], bool]]:
    """A shim module's `TARGETS` and `install()`: each allennlp object named (dotted) in `guards` becomes
    a function of its name and signature returning `guard(original, *args, **kwargs)`."""

    def install() -> bool:
        for target, guard in guards.items():
            owner, _, name = target.rpartition(".")
            install_shim(pkgutil.resolve_name(owner), name, _wrapping(guard), shim=guard)
        return True

    return tuple(guards), install
