"""
`install_shim`, the one way the plugin replaces an allennlp object (its compat shims and guards),
once per process and shim; `installer` builds a module's `install()` from its guards.
"""
import functools
import importlib
import inspect
from typing import Any, Callable, Dict, Optional, Tuple

# (owner, attribute, shim) -> the object the shim replaced.
_ORIGINALS: Dict[Tuple[Any, str, str], Any] = {}


def install_shim(owner: Any, name: str, make: Callable[[Callable], Callable], shim: Optional[Callable] = None) -> None:
    """
    Replaces `owner.name` by `make(original)`, once per process and `shim` (default `make`); a
    classmethod stays one (`make` gets and returns its function).
    """
    shim = shim or make
    key = (owner, name, f"{shim.__module__}.{shim.__qualname__}")
    if key in _ORIGINALS:
        return
    is_classmethod = isinstance(owner, type) and isinstance(inspect.getattr_static(owner, name), classmethod)
    original = getattr(owner, name)
    original = original.__func__ if is_classmethod else original
    replacement = make(original)
    _ORIGINALS[key] = original
    setattr(owner, name, classmethod(replacement) if is_classmethod else replacement)


def _owner(dotted: str) -> Tuple[Any, str]:
    """The module or class holding the object `dotted` names, and the object's name there."""
    path, _, name = dotted.rpartition(".")
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        return functools.reduce(getattr, parts[end:], owner), name
    raise ImportError(f"no module for {dotted}")


def _wrapping(guard: Callable) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def replacement(*args, **kwargs):
            return guard(original, *args, **kwargs)

        return replacement

    return make


def installer(guards: Dict[str, Callable]) -> Callable[[], bool]:
    """
    A shim module's `install()`: each allennlp object named (dotted) in `guards` becomes a function of
    its name and signature returning `guard(original, *args, **kwargs)`.
    """

    def install() -> bool:
        for target, guard in guards.items():
            owner, name = _owner(target)
            install_shim(owner, name, _wrapping(guard), shim=guard)
        return True

    return install
