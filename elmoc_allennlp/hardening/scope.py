"""
What is the plugin's own, for the guards installed with it: a config naming one of its registered
components (an `elmoc*` name, or an older alias of such a class, or a dotted `elmoc_allennlp.`
class), or a model-level `elmo` block with an ELMo-C `archive_file`; a run, archive or serialization
folder whose `config.json` is such a config (or, for a config that is not JSON, whose text says
`elmoc`), or an archive with an `elmoc_*` member; a model with a module of this package. With
`everywhere` (the switch, `elmoc_allennlp_hardening.py`) everything counts as the plugin's own.
"""
import json
import os
import posixpath
import tarfile
from typing import Any, Dict, Optional, Tuple

from elmoc_allennlp.common.archives import CONFIG_NAME, archive_limit, find_keys

_EVERYWHERE = False
_PACKAGE = "elmoc_allennlp."
# Modules whose registrations stand in for allennlp's own (`compat/reduce_on_plateau.py`).
_STANDINS = "elmoc_allennlp.compat"
# (path, inode, size, mtime) -> whether the archive there is the plugin's.
_ARCHIVES: Dict[Tuple, bool] = {}


def set_everywhere(value: bool) -> None:
    """Every guard applies to everything (`True`, the switch) or to the plugin's own only."""
    global _EVERYWHERE
    _EVERYWHERE = value


def everywhere() -> bool:
    return _EVERYWHERE


def _plugin_names() -> set:
    from allennlp.common.registrable import Registrable

    return {
        name
        for entries in Registrable._registry.values()
        for name, (cls, _) in entries.items()
        if cls.__module__.startswith(_PACKAGE) and not cls.__module__.startswith(_STANDINS)
    }


def plugin_config(config: Any) -> bool:
    """Whether a config (a dict, or allennlp `Params`) uses a component of the plugin."""
    if _EVERYWHERE:
        return True
    config = getattr(config, "params", config)  # `Params` hold their dict there
    names = _plugin_names()
    for _, value in find_keys(config, "type"):
        if isinstance(value, str) and (value in names or value.startswith(_PACKAGE)):
            return True
    return any(
        isinstance(block, dict) and "archive_file" in block for block in _values(config, "elmo")
    )


def _values(config: Any, key: str):
    stack = [config]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
            if key in value:
                yield value[key]
        elif isinstance(value, list):
            stack.extend(value)


def plugin_text(data: bytes) -> bool:
    """Whether the text of a `config.json` is the plugin's: a JSON config using its components,
    or a config that is not JSON (jsonnet) and says `elmoc`."""
    if _EVERYWHERE:
        return True
    try:
        return plugin_config(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return b"elmoc" in data


def plugin_run(serialization_dir: Any) -> bool:
    """Whether the `config.json` of a serialization folder (or extracted archive) is the plugin's."""
    if _EVERYWHERE:
        return True
    path = os.path.join(os.fspath(serialization_dir), CONFIG_NAME)
    try:
        if os.path.getsize(path) > archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES"):
            return True  # too large to look at: the guards refuse it
        with open(path, "rb") as config:
            return plugin_text(config.read())
    except OSError:
        return False


def plugin_archive(archive_file: Any) -> bool:
    """
    Whether the archive (a `.tar.gz` or a folder) at `archive_file` is the plugin's, from its
    members' headers and its `config.json` members, read without extracting anything (once per
    archive and process). An archive whose headers pass the extraction limits before that is
    known counts as the plugin's, so that it is refused within them; one that is not a readable
    tar archive is allennlp's to report.
    """
    if _EVERYWHERE:
        return True
    path = os.fspath(archive_file)
    if os.path.isdir(path):
        return plugin_run(path)
    try:
        status = os.stat(path)
    except OSError:
        return False
    key = (os.path.realpath(path), status.st_ino, status.st_size, status.st_mtime_ns)
    if key not in _ARCHIVES:
        _ARCHIVES[key] = _scan(path, status.st_size)
    return _ARCHIVES[key]


def _scan(path: str, size: int) -> bool:
    json_limit = archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES")
    byte_limit = min(archive_limit("ELMOC_ARCHIVE_MAX_BYTES"),
                     max(1 << 30, archive_limit("ELMOC_ARCHIVE_MAX_RATIO") * size))
    member_limit = archive_limit("ELMOC_ARCHIVE_MAX_MEMBERS")
    members = total = 0
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                members += 1
                total += member.size
                name = posixpath.normpath(member.name)
                if name.split("/")[0].startswith("elmoc_"):
                    return True
                if posixpath.basename(name) == CONFIG_NAME and member.isfile():
                    if member.size > json_limit:
                        return True
                    data: Optional[Any] = tar.extractfile(member)
                    if plugin_text(data.read() if data is not None else b""):
                        return True
                if members > member_limit or total > byte_limit:
                    return True
                tar.members = []  # headers only: keep none of them in memory
    except Exception:  # noqa: BLE001  (not a tar archive, truncated, ...: allennlp reports it)
        return False
    return False


def plugin_model(model: Any) -> bool:
    """Whether a model (a `torch.nn.Module`) has a module of the plugin."""
    if _EVERYWHERE:
        return True
    modules = model.modules() if hasattr(model, "modules") else [model]
    return any(type(module).__module__.startswith(_PACKAGE) for module in modules)
