"""
`install_shim`: the one way the plugin replaces an allennlp object (the shims of
`elmoc_allennlp.compat` and the guards of `elmoc_allennlp.hardening` use it), once per process
and shim, keeping the original.
"""
import inspect
from typing import Any, Callable, Dict, Tuple

# (owner, attribute, shim) -> the object the shim replaced.
_ORIGINALS: Dict[Tuple[Any, str, str], Any] = {}


def install_shim(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    """
    Replaces `owner.name` (a module's or a class's attribute) by `make(original)`, once per
    process and shim (a second call does nothing). A classmethod stays one: `make` gets and
    returns its function.
    """
    key = (owner, name, f"{make.__module__}.{make.__qualname__}")
    if key in _ORIGINALS:
        return
    is_classmethod = isinstance(owner, type) and isinstance(
        inspect.getattr_static(owner, name), classmethod
    )
    original = getattr(owner, name)
    original = original.__func__ if is_classmethod else original
    replacement = make(original)
    _ORIGINALS[key] = original
    setattr(owner, name, classmethod(replacement) if is_classmethod else replacement)
