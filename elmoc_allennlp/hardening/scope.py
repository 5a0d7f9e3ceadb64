"""What is the plugin's own, for its guards (with the switch, everything): its configs, runs, archives and
models (docs/trust_and_safety.md)."""
import json
import os
import posixpath
import stat
import tarfile
import zipfile
from typing import Any, Dict, Tuple

from elmoc_allennlp.common.archives import CONFIG_NAME, archive_limit, extraction_limits, walk
from elmoc_allennlp.common.archives.zip_archives import zipped_configs

_EVERYWHERE = False
_PACKAGE = "elmoc_allennlp."
_STANDINS = "elmoc_allennlp.compat"  # registrations standing in for allennlp's own
_ARCHIVES: Dict[Tuple, bool] = {}  # (path, inode, size, mtime) -> the plugin's?


def set_everywhere(value: bool) -> None:
    """Every guard applies to everything (`True`, the switch) or to the plugin's own only."""
    global _EVERYWHERE
    _EVERYWHERE = value


def everywhere() -> bool:
    return _EVERYWHERE


def plugin_config(config: Any) -> bool:
    """Whether a config (a dict, or allennlp `Params`) uses a component of the plugin."""
    if _EVERYWHERE:
        return True
    from allennlp.common.registrable import Registrable

    names = {
        name
        for entries in Registrable._registry.values()
        for name, (cls, _) in entries.items()
        if cls.__module__.startswith(_PACKAGE) and not cls.__module__.startswith(_STANDINS)
    }
    for _, key, value, _ in walk(getattr(config, "params", config)):  # `Params` hold their dict there
        if key == "type" and isinstance(value, str) and (value in names or value.startswith(_PACKAGE)):
            return True
        # A model-level `elmo` block with an `archive_file` (compat/elmoc_as_elmo.py).
        if key == "elmo" and isinstance(value, dict) and "archive_file" in value:
            return True
    return False


def plugin_text(data: bytes) -> bool:
    """Whether the text of a `config.json` is the plugin's (`plugin_config`; not JSON: says `elmoc`)."""
    try:
        return plugin_config(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _EVERYWHERE or b"elmoc" in data


def plugin_run(serialization_dir: Any) -> bool:
    """Whether the `config.json` of a serialization folder (or extracted archive) is the plugin's."""
    path = os.path.join(os.fspath(serialization_dir), CONFIG_NAME)
    try:
        if os.path.getsize(path) > archive_limit("ELMOC_ARCHIVE_MAX_JSON_BYTES"):
            return True  # too large to look at: the guards refuse it
        with open(path, "rb") as config:
            return plugin_text(config.read())
    except OSError:
        return _EVERYWHERE


def plugin_archive(archive_file: Any) -> bool:
    """Whether the archive (a `.tar.gz` or a folder) is the plugin's, from its headers and `config.json`
    members, once per archive; one past the extraction limits is (to be refused within them)."""
    path = os.fspath(archive_file)
    if _EVERYWHERE or os.path.isdir(path):
        return _EVERYWHERE or plugin_run(path)
    try:
        status = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(status.st_mode):  # never opened: a FIFO would block
        return False
    key = (os.path.realpath(path), status.st_ino, status.st_size, status.st_mtime_ns)
    if key not in _ARCHIVES:
        _ARCHIVES[key] = _scan(path, status.st_size)
    return _ARCHIVES[key]


def _scan(path: str, size: int) -> bool:
    member_limit, byte_limit, json_limit, *_ = extraction_limits(size)
    members, total = 0, 0
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                members, total = members + 1, total + member.size
                name = posixpath.normpath(member.name)
                if name.split("/")[0].startswith("elmoc_") or members > member_limit or total > byte_limit:
                    return True
                if posixpath.basename(name) == CONFIG_NAME and member.isfile():
                    if member.size > json_limit or plugin_text(tar.extractfile(member).read()):
                        return True
                tar.members = []  # headers only: keep none of them in memory
    except Exception:  # noqa: BLE001  (no tar archive, truncated, ...: allennlp reports it)
        # A zip, which allennlp cannot read, is the plugin's if it holds a plugin's config (to be refused).
        return zipfile.is_zipfile(path) and any(
            data is None or plugin_text(data) for _, data in zipped_configs(path, json_limit)
        )
    return False


def plugin_model(model: Any) -> bool:
    """Whether a model (a `torch.nn.Module`) has a module of the plugin."""
    modules = model.modules() if hasattr(model, "modules") else [model]
    return _EVERYWHERE or any(type(module).__module__.startswith(_PACKAGE) for module in modules)
