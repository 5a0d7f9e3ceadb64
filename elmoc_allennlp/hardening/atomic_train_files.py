"""`allennlp train` of the plugin's runs writes `config.json` and `meta.json` atomically (allennlp 2.10.1 writes
them in place: a kill leaves a truncated config, a full disk an empty meta.json), and a full disk while the
vocabulary is saved is a `DiskFullError` naming its folder; its `model.tar.gz` is written atomically by
`compat/carried_files.py`."""

import os

from elmoc_allennlp.common.atomic_files import atomic_path
from elmoc_allennlp.common.disk_full import DiskFullError, disk_full_error, find_disk_full
from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import plugin_config, plugin_run

REPLACES = "`allennlp train` of the plugin's runs writes config.json and meta.json atomically, names a full disk"


def _to_file(original, self, params_file: str, preference_orders=None) -> None:
    if not plugin_config(self):
        return original(self, params_file, preference_orders)
    with atomic_path(params_file) as temporary:
        original(self, temporary, preference_orders)


def _meta_to_file(original, self, path) -> None:
    if not plugin_run(os.path.dirname(os.path.abspath(os.fspath(path)))):
        return original(self, path)
    with atomic_path(
        path
    ) as temporary:  # a full disk: a `DiskFullError` naming meta.json, none left
        original(self, temporary)


def _save_vocabulary(original, self, directory) -> None:
    if not plugin_run(os.path.dirname(os.path.abspath(os.fspath(directory)))):
        return original(self, directory)
    try:
        original(self, directory)
    except OSError as error:
        full = find_disk_full(error)
        if full is None or isinstance(error, DiskFullError):
            raise
        raise disk_full_error(directory, full) from None


TARGETS, install = installer(
    {
        "allennlp.common.params.Params.to_file": _to_file,
        "allennlp.common.meta.Meta.to_file": _meta_to_file,
        "allennlp.data.vocabulary.Vocabulary.save_to_files": _save_vocabulary,
    }
)
