"""The kind check of archived configs, as data: each section loading builds names a subclass of its base
class (`model` a `Model`, `dataset_reader` a `DatasetReader`, ...), and so does each nested slot whose
base class the constructor's annotation gives; no module a config names is imported."""

import collections.abc
import importlib
import inspect
import sys
import types
import typing
from typing import Any, Dict, List, Optional, Tuple

from allennlp.common.checks import ConfigurationError

# The sections of an archived config that loading builds, and the base class each must name:
# `load_archive` builds the model and both readers (the predictors use them), `Model.load` the
# vocabulary's class, `allennlp evaluate` the evaluator and a data loader.
_LOADERS = "allennlp.data.data_loaders.data_loader"
SECTION_BASES = (
    ("model", "allennlp.models.model", "Model"),
    ("dataset_reader", "allennlp.data.dataset_readers.dataset_reader", "DatasetReader"),
    ("validation_dataset_reader", "allennlp.data.dataset_readers.dataset_reader", "DatasetReader"),
    ("vocabulary", "allennlp.data.vocabulary", "Vocabulary"),
    ("data_loader", _LOADERS, "DataLoader"),
    ("validation_data_loader", _LOADERS, "DataLoader"),
    ("evaluation", "allennlp.evaluation.evaluator", "Evaluator"),
)
BUILT_SECTIONS = tuple(section for section, _, _ in SECTION_BASES)
_SEQUENCES = (
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.Iterable,
    collections.abc.Set,
)
_UNIONS = (typing.Union, getattr(types, "UnionType", typing.Union))  # `X | None` from Python 3.10
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
# Nested slots deeper than this are left to `check_config_types` (real configs nest under 10 levels).
_MAX_SLOT_DEPTH = 64


def check_section_kinds(config: Dict[str, Any], source: str) -> None:
    """
    Refuses, before anything is built, a `"type"` in a section loading builds (or in a nested slot of
    known base class) that names a class of another kind: a dotted name of an imported class that is
    not a subclass of the slot's base class, or a name not registered under that base class.
    """
    for section, module, name in SECTION_BASES:
        params = config.get(section)
        if isinstance(params, dict):
            _check_slot(params, getattr(importlib.import_module(module), name), section, source)


def _check_slot(params: Dict[str, Any], base: type, where: str, source: str) -> None:
    stack: List[Tuple[Dict[str, Any], type, str, int]] = [(params, base, where, 1)]
    while stack:
        params, base, where, depth = stack.pop()
        resolved = _resolve(params, base, where, source)
        if resolved is None or depth > _MAX_SLOT_DEPTH:
            continue
        cls, constructor = resolved
        annotations = _parameter_annotations(cls, constructor)
        for key, value in params.items():
            if key == "type" or key not in annotations:
                continue
            for child_where, child, child_base in _slots(value, annotations[key], f"{where}.{key}"):
                stack.append((child, child_base, child_where, depth + 1))


def _resolve(
    params: Dict[str, Any], base: type, where: str, source: str
) -> Optional[Tuple[type, Optional[str]]]:
    """The class (and registered constructor) allennlp builds for `params` in a slot of `base`, or
    `None` where it cannot be told (allennlp reports it); a class of another kind is refused."""
    from allennlp.common.registrable import Registrable

    registry = Registrable._registry.get(base)  # `.get`: `_registry` is a defaultdict
    if registry is None:  # not a registrable base: allennlp builds `base` itself
        return base, None
    name = params.get("type", getattr(base, "default_implementation", None))
    if not isinstance(name, str):
        return None
    if name in registry:
        return registry[name]
    kind = f"{base.__module__}.{base.__name__}"
    if "." not in name:
        raise ConfigurationError(
            f"{source}: {where}.type is {name!r}, which is not a registered {base.__name__} "
            f"(the slot takes {_a(kind)}); nothing was built"
        )
    module_name, _, attribute = name.rpartition(".")
    found = getattr(sys.modules.get(module_name), attribute, None)  # never imported here
    if found is None:
        return None  # not imported: `check_config_types` refuses it
    registered = {cls for cls, _ in registry.values()}
    if not (isinstance(found, type) and issubclass(found, base)) and found not in registered:
        what = found.__name__ if isinstance(found, type) else type(found).__name__
        raise ConfigurationError(
            f"{source}: {where}.type is {name!r}, which is not {_a(base.__name__)} ({what}; the slot "
            f"takes a subclass of {kind}); nothing was built"
        )
    return found, None


def _a(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _parameter_annotations(cls: type, constructor: Optional[str]) -> Dict[str, Any]:
    """The annotations of the parameters allennlp passes to `cls`'s constructor (its `**kwargs`
    followed into the superclass, as allennlp does)."""
    from allennlp.common.from_params import infer_method_params

    method = cls.__init__ if constructor is None else getattr(cls, constructor, None)
    if method is None:
        return {}
    try:
        parameters = infer_method_params(cls, method)
    except (
        Exception
    ):  # noqa: BLE001  (no signature, ...: no slot is known, allennlp reports what it cannot build)
        return {}
    return {
        name: parameter.annotation
        for name, parameter in parameters.items()
        if parameter.annotation is not inspect.Parameter.empty
    }


def _slots(value: Any, annotation: Any, where: str) -> List[Tuple[str, Dict[str, Any], type]]:
    """The nested configs of `value` (a parameter annotated `annotation`) and the base class of each:
    `X`, `Optional[X]`, `Lazy[X]`, a list, tuple or set of `X`, a dict of `X` values."""
    from allennlp.common.from_params import FromParams
    from allennlp.common.lazy import Lazy

    found: List[Tuple[str, Dict[str, Any], type]] = []
    pending = [(value, annotation, where)]
    while pending:
        value, annotation, where = pending.pop()
        origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
        if origin in _UNIONS:
            classes = [argument for argument in arguments if argument is not type(None)]
            if len(classes) == 1:  # `Optional[X]`; a union of kinds is left to allennlp
                pending.append((value, classes[0], where))
        elif origin is Lazy and arguments:
            pending.append((value, arguments[0], where))
        elif isinstance(value, list) and origin in _SEQUENCES and arguments:
            items = (
                list(zip(value, arguments))
                if origin is tuple and arguments[-1] is not Ellipsis
                else [(item, arguments[0]) for item in value]
            )
            pending.extend(
                (item, kind, f"{where}.{index}") for index, (item, kind) in enumerate(items)
            )
        elif isinstance(value, dict) and origin in _MAPPINGS and len(arguments) == 2:
            pending.extend((item, arguments[1], f"{where}.{key}") for key, item in value.items())
        elif (
            isinstance(value, dict)
            and origin is None
            and isinstance(annotation, type)
            and issubclass(annotation, FromParams)
        ):
            found.append((where, value, annotation))
    return found
