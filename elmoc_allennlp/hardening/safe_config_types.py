"""Opt-in: a dotted config `"type"` must resolve to a subclass of the base asked for, or a class
registered under it (allennlp 2.10.1 imports and calls it unchecked: `subprocess.Popen` runs)."""

from allennlp.common.checks import ConfigurationError
from allennlp.common.registrable import Registrable

from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import everywhere

REPLACES = "a dotted config type must name a subclass of the requested kind"


def _resolve_class_name(original, cls, name: str):
    subclass, constructor = original(cls, name)
    if name in Registrable._registry[cls] or not everywhere():
        return subclass, constructor
    registered = {entry[0] for entry in Registrable._registry[cls].values()}
    if (
        not (isinstance(subclass, type) and issubclass(subclass, cls))
        and subclass not in registered
    ):
        raise ConfigurationError(
            f'"type": "{name}" is not a {cls.__name__}: a dotted type name must name a '
            f"subclass of {cls.__module__}.{cls.__name__}"
        )
    return subclass, constructor


TARGETS, install = installer(
    {"allennlp.common.registrable.Registrable.resolve_class_name": _resolve_class_name}
)
