"""`load_archive` extracts the plugin's archives with `common.archives` and reads their config with
`read_config` (allennlp 2.10.1 extracts unfiltered and reads jsonnet, importing any dotted type);
a plugin serialization folder read as an archive is checked as an extracted one is
(`check_model_folder`: its weights file is a pickle torch 1.12 unpickles whole)."""

import json
import os

import allennlp.models.archival as archival
from allennlp.common.params import Params, parse_overrides, with_overrides

from elmoc_allennlp.common.archives import (
    check_model_folder,
    extracted_archive,
    extracted_from,
    read_config,
)
from elmoc_allennlp.common.shims import install_shim, installer
from elmoc_allennlp.hardening.scope import plugin_archive, plugin_run

REPLACES = (
    "the plugin's archives are extracted checked and bounded; their config.json is strict JSON"
)


class ArchiveParams(Params):
    """`Params` whose `from_file` reads a config of the plugin's archives with `read_config`,
    and any other with allennlp's `Params.from_file`."""

    @classmethod
    def from_file(cls, params_file, params_overrides="", ext_vars=None) -> Params:
        directory, member = os.path.split(os.fspath(params_file))
        archive = extracted_from(directory)
        if archive is None and not plugin_run(directory):
            return Params.from_file(params_file, params_overrides, ext_vars)
        if archive is None:  # a folder: checked here, before allennlp reads its weights
            check_model_folder(directory, directory)
        config = read_config(directory, archive or directory, member)
        if isinstance(params_overrides, dict):
            params_overrides = json.dumps(params_overrides)
        overrides = parse_overrides(params_overrides, ext_vars=ext_vars)
        return cls(with_overrides(config, overrides) if overrides else config)


def _extracted_archive(original, resolved_archive_file, cleanup: bool = True):
    chosen = extracted_archive if plugin_archive(resolved_archive_file) else original
    return chosen(resolved_archive_file, cleanup=cleanup)


_EXTRACTION, _install_extraction = installer(
    {"allennlp.models.archival.extracted_archive": _extracted_archive}
)
TARGETS = _EXTRACTION + ("allennlp.models.archival.Params",)


def install() -> bool:
    _install_extraction()
    install_shim(archival, "Params", lambda original: ArchiveParams, shim=ArchiveParams)
    return True
