"""Whose a config, run or archive is, for the guards (with the switch, everything is the plugin's): the
plugin's when its config names a component the plugin registers, or is no config allennlp writes (no
JSON object, none in an archive), decided once per config file (docs/compat.md). Nothing else of an
archive counts: not its members' names, not their sizes."""

import functools
import json
import os
import posixpath
import stat
import tarfile
import zipfile
from typing import Any, Callable, Dict, FrozenSet, Tuple

from elmoc_allennlp.common.archives import CONFIG_NAME, walk
from elmoc_allennlp.common.archives.zip_archives import zipped_configs

_EVERYWHERE = False
_PACKAGE = "elmoc_allennlp."
_STANDINS = "elmoc_allennlp.compat"  # registrations standing in for allennlp's own
# The most of a config.json read to decide (past it, the text read so far decides).
_READ_BYTES = 16 << 20
# Compressed bytes read at a time up to an archive's config.json: one tar block.
OWNERSHIP_READ = tarfile.BLOCKSIZE
_DECIDED: Dict[Tuple, bool] = (
    {}
)  # (device, inode, size, mtime) of a config.json or archive -> the plugin's?


def set_everywhere(value: bool) -> None:
    """Every guard applies to everything (`True`, the switch) or to the plugin's own only."""
    global _EVERYWHERE
    _EVERYWHERE = value


def everywhere() -> bool:
    return _EVERYWHERE


@functools.lru_cache(maxsize=None)
def plugin_names() -> FrozenSet[str]:
    """The names the plugin registers components under (its stand-ins for allennlp's own left out),
    computed at the first question, after `import elmoc_allennlp` has registered them all."""
    from allennlp.common.registrable import Registrable

    return frozenset(
        name
        for entries in Registrable._registry.values()
        for name, (cls, _) in entries.items()
        if cls.__module__.startswith(_PACKAGE) and not cls.__module__.startswith(_STANDINS)
    )


def plugin_config(config: Any) -> bool:
    """Whether a config (a dict, or allennlp `Params`) uses a component of the plugin."""
    if _EVERYWHERE:
        return True
    names = plugin_names()
    for _, key, value, _ in walk(
        getattr(config, "params", config)
    ):  # `Params` hold their dict there
        if (
            key == "type"
            and isinstance(value, str)
            and (value in names or value.startswith(_PACKAGE))
        ):
            return True
        # A model-level `elmo` block with an `archive_file` (compat/elmoc_as_elmo.py).
        if key == "elmo" and isinstance(value, dict) and "archive_file" in value:
            return True
    return False


def plugin_text(data: bytes) -> bool:
    """Whether the text of a `config.json` is the plugin's: a JSON object by `plugin_config`; any other text,
    which allennlp never writes, gets the plugin's checks (unless cut at `_READ_BYTES` and not saying `elmoc`).
    """
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return len(data) < _READ_BYTES or b"elmoc" in data
    return not isinstance(config, dict) or plugin_config(config)


def plugin_run(serialization_dir: Any) -> bool:
    """Whether the `config.json` of a serialization folder (or extracted archive) is the plugin's."""
    path = os.path.join(os.fspath(serialization_dir), CONFIG_NAME)
    return _EVERYWHERE or _decided(path, lambda: _read_config(path))


def plugin_archive(archive_file: Any) -> bool:
    """Whether an archive (a `.tar.gz` or a folder) is the plugin's, from its `config.json`: for a `.tar.gz`
    the first member of that name, read without going further (allennlp's `archive_model` writes it first).
    """
    path = os.fspath(archive_file)
    if os.path.isdir(path):
        return plugin_run(path)
    return _EVERYWHERE or _decided(path, lambda: _read_member(path))


def _decided(path: str, decide: Callable[[], bool]) -> bool:
    """`decide()` for the regular file `path`, once per version of it; `False` for no such file."""
    try:
        status = os.stat(path)
        if not stat.S_ISREG(status.st_mode):  # never opened: a FIFO would block
            return False
        key = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        if key not in _DECIDED:
            _DECIDED[key] = decide()
        return _DECIDED[key]
    except OSError:
        return False


def _read_config(path: str) -> bool:
    with open(path, "rb") as config:
        return plugin_text(config.read(_READ_BYTES))


def _read_member(path: str) -> bool:
    try:
        # A stream, read up to the config only, `OWNERSHIP_READ` compressed bytes at a time: damage
        # further on (a flipped byte in the weights) is not met before the config is read, and the
        # archive is the plugin's, refused with its name (tarfile's default, 10 KiB at a time, met
        # it in a small archive, which then went to allennlp's unchecked extraction).
        with tarfile.open(path, "r|*", bufsize=OWNERSHIP_READ) as tar:
            for member in tar:
                if (
                    posixpath.normpath(member.name) == CONFIG_NAME
                ):  # not a file: allennlp reports it
                    return plugin_text(tar.extractfile(member).read(_READ_BYTES))
                tar.members = []  # headers only: keep none of them in memory
    except Exception:  # noqa: BLE001  (no tar archive, truncated, ...: allennlp reports it)
        # A zip, which allennlp cannot read, is the plugin's if it holds a plugin's config (to be refused).
        return zipfile.is_zipfile(path) and any(
            data is None or plugin_text(data) for _, data in zipped_configs(path, _READ_BYTES)
        )
    return True  # no config.json, which allennlp always writes: the plugin's checks say so
