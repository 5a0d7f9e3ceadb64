"""
allennlp 2.10.1 problem: a config's `"type"` may be a dotted Python name
(`Registrable.resolve_class_name`), which allennlp imports and calls with the remaining keys
without checking that it is a class of the kind asked for: `"model": {"type": "subprocess.Popen",
"args": "...", "shell": true}` runs a shell command.

`install()` wraps `resolve_class_name` so that a dotted name must resolve to a subclass of the
registrable base class asked for (or to a class already registered under it, e.g. the torch
modules registered as activations); anything else is a `ConfigurationError` naming the type.
This covers the configs a user writes (whose dotted types allennlp still imports); a config from
an archive is checked before anything is imported (`elmoc_allennlp.common.archives`). Registered
names are unaffected. To drop it: once allennlp checks this itself, delete this module and its
name in `SHIMS`.
"""
import functools

from allennlp.common.checks import ConfigurationError
from allennlp.common.registrable import Registrable


REPLACES = "a dotted config type must name a subclass of the requested kind"
TARGETS = ("allennlp.common.registrable.Registrable.resolve_class_name",)


def install() -> bool:
    """Refuses dotted config types that are not classes of the requested kind (idempotent)."""
    original = Registrable.__dict__["resolve_class_name"].__func__
    if getattr(original, "_elmoc_checked", False):
        return True

    @functools.wraps(original)
    def resolve_class_name(cls, name: str):
        subclass, constructor = original(cls, name)
        if name in Registrable._registry[cls]:
            return subclass, constructor
        registered = {entry[0] for entry in Registrable._registry[cls].values()}
        is_subclass = isinstance(subclass, type) and issubclass(subclass, cls)
        if not is_subclass and subclass not in registered:
            raise ConfigurationError(
                f'"type": "{name}" is not a {cls.__name__}: a dotted type name must name a '
                f"subclass of {cls.__module__}.{cls.__name__}. Refusing to call it (a config, "
                "for example one inside a downloaded model archive, may only build registered "
                "components)."
            )
        return subclass, constructor

    resolve_class_name._elmoc_checked = True  # type: ignore[attr-defined]
    Registrable.resolve_class_name = classmethod(resolve_class_name)  # type: ignore[assignment]
    return True
