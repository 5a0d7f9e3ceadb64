"""The self-contained policy of archived configs: strict JSON, dotted types never imported and of the
kind their slot takes, no URL and no other archive in the sections loading builds, which together imply
at most `ELMOC_ARCHIVE_MAX_PARAMETERS`."""

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Union

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives.limits import (
    CARRIED_DIRECTORY,
    CONFIG_NAME,
    MAX_JSON_DEPTH,
    _regular_file,
    archive_limit,
    find_keys,
    walk,
)
from elmoc_allennlp.common.archives.parameter_bound import config_parameter_bound
from elmoc_allennlp.common.archives.section_kinds import BUILT_SECTIONS, check_section_kinds

# The sections of a config that loading an archive builds (not the data paths, not the vocabulary).
_LOADED_SECTIONS = ("model", "dataset_reader", "validation_dataset_reader")
# Keys whose subtrees allennlp's `load_archive` drops before building (`remove_keys_from_params`).
_DROPPED_AT_LOADING = frozenset(("pretrained_file", "initializer"))
# Registered constructors that open another archive.
_OTHER_ARCHIVE_TYPES = ("from_archive", "elmoc_bilm_from_archive")


class _NotJson:
    """Python's `json` reads `NaN`, `Infinity` and `-Infinity`, which JSON has not: as this."""

    def __init__(self, name: str) -> None:
        self.name = name


def read_config(
    directory: Union[str, os.PathLike], archive: str, member: str = CONFIG_NAME
) -> Dict[str, Any]:
    """The strict-JSON config `member` of an extracted archive, its types checked."""
    path = _regular_file(directory, member, archive)
    if path is None:
        raise ConfigurationError(f"Model archive {archive} has no {member}")
    limit = archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES")
    if os.path.getsize(path) > limit:
        raise ConfigurationError(
            f"Model archive {archive}: {member} is larger than ELMOC_ARCHIVE_MAX_JSON_BYTES ({limit:,})"
        )
    source = f"{archive} ({member})"
    try:
        config = json.loads(path.read_bytes().decode("utf-8"), parse_constant=_NotJson)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ConfigurationError(
            f"The {member} of model archive {archive} is not JSON ({type(error).__name__}: "
            f"{str(error)[:200]}); archived configs are strict JSON, never jsonnet"
        ) from None
    if not isinstance(config, dict):
        raise ConfigurationError(f"The {member} of model archive {archive} is not a JSON object")
    for key, _, value, depth in walk(config):
        if depth > MAX_JSON_DEPTH:
            raise ConfigurationError(
                f"The {member} of model archive {archive} nests deeper than {MAX_JSON_DEPTH} levels"
            )
        if isinstance(value, _NotJson):
            raise ConfigurationError(
                f"{source}: {key} is {value.name}, which strict JSON does not have "
                "(archived configs are strict JSON)"
            )
    if member.endswith(CONFIG_NAME) and not isinstance(config.get("model"), dict):
        raise ConfigurationError(f"The {member} of model archive {archive} has no model section")
    check_config_types(config, source)
    if member.endswith(CONFIG_NAME):
        check_section_kinds(config, source)
        check_self_contained(config, directory, source)
        check_parameter_bound(config, source)
    return config


def check_parameter_bound(config: Dict[str, Any], source: str) -> None:
    """The sections loading builds (the model, the readers, ...: `BUILT_SECTIONS`) together imply at most
    `ELMOC_ARCHIVE_MAX_PARAMETERS` parameters (`config_parameter_bound` of each). Only the model's are
    held by `weights.th` (extraction compares those)."""
    limit = archive_limit("ELMOC_ARCHIVE_MAX_PARAMETERS")
    total, largest = 0, (0, "model")
    for section in BUILT_SECTIONS:
        bound, key = config_parameter_bound(config.get(section), section)
        total += bound
        largest = max(largest, (bound, key))
    if total > limit:
        raise ConfigurationError(
            f"{source}: {largest[1]} makes the {largest[1].split('.')[0]} at least {largest[0]:,} parameters "
            f"(the sections loading builds {total:,}), past ELMOC_ARCHIVE_MAX_PARAMETERS ({limit:,}); "
            "nothing was built"
        )


def carried_bilm_directory(serialization_dir: Union[str, os.PathLike], archive_file: str) -> Path:
    """Where a downstream run (or its archive) carries the copy of the biLM named `archive_file` in its config."""
    key = hashlib.sha256(os.fspath(archive_file).encode("utf-8")).hexdigest()[:16]
    return Path(serialization_dir) / CARRIED_DIRECTORY / key


def check_self_contained(
    config: Dict[str, Any], directory: Union[str, os.PathLike], source: str
) -> None:
    """The sections loading builds (less the keys allennlp drops) name no URL and no other archive: no
    `from_archive`, `elmoc_bilm_from_archive` or biLM `archive_file` not carried in `elmoc_bilm/`.
    """
    for section in _LOADED_SECTIONS:
        for key, name, value, _ in walk(config.get(section), section, skip=_DROPPED_AT_LOADING):
            if not isinstance(value, str):
                continue
            if "://" in value:
                raise ConfigurationError(
                    f"{source}: {key} is the URL {value[:200]!r}; loading an archive reads nothing outside it"
                )
            if name == "type" and value in _OTHER_ARCHIVE_TYPES:
                raise ConfigurationError(
                    f"{source}: {key} is {value!r}, which opens another archive; loading an "
                    "archive reads nothing outside it"
                )
            if name == "archive_file":
                carried = carried_bilm_directory(directory, value) / CONFIG_NAME
                if not (os.path.isfile(carried) and not os.path.islink(carried)):
                    raise ConfigurationError(
                        f"{source}: {key} names the archive {value[:200]!r}, whose copy this "
                        "archive does not carry (elmoc_bilm/); loading an archive reads nothing "
                        "outside it"
                    )


def check_config_types(config: Dict[str, Any], source: str) -> None:
    """Every dotted `"type"` is a registered name, or a component class of a module already imported."""
    from allennlp.common.from_params import FromParams
    from allennlp.common.registrable import Registrable

    registry = [entry for entries in Registrable._registry.values() for entry in entries.items()]
    for key, value in find_keys(config, "type"):
        if not isinstance(value, str) or "." not in value:
            continue
        module_name, _, attribute = value.rpartition(".")
        found = getattr(sys.modules.get(module_name), attribute, None)
        component = isinstance(found, type) and issubclass(found, FromParams)
        if not (component or any(value == name or found is cls for name, (cls, _) in registry)):
            raise ConfigurationError(
                f"{source}: {key} is {value!r}, which is neither a registered name nor a component "
                "class of an imported module. Names in an archive are never imported: import the "
                "package yourself (--include-package) if you trust it."
            )
