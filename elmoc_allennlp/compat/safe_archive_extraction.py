"""
`load_archive` extracts archives checked and bounded, and reads their config as strict JSON.

**Problem (allennlp 2.10.1).** `load_archive` extracts with `tarfile.extractall` and no filter
(names and links may write anywhere, a small archive may fill the disk) and reads `config.json`
as jsonnet with the environment as external variables, importing any dotted `"type"`.

**Workaround.** `install()` replaces `archival.extracted_archive` and `archival.Params` with
`common.archives.extracted_archive` and `ArchiveParams` (`read_config`, then the overrides).

**To drop it**: when allennlp extracts with a filter and reads archived configs as JSON, remove
this module and its entry in `elmoc_allennlp.compat.SHIMS`.
"""
import json
import os

from allennlp.common.params import Params, parse_overrides, with_overrides

from elmoc_allennlp.common.archives import extracted_archive, extracted_from, read_config

REPLACES = "archives are extracted checked and bounded; their config.json is strict JSON"
TARGETS = (
    "allennlp.models.archival.extracted_archive",
    "allennlp.models.archival.Params",
)


class ArchiveParams(Params):
    """`Params` whose `from_file` reads an archived `config.json` with `read_config`."""

    @classmethod
    def from_file(cls, params_file, params_overrides="", ext_vars=None) -> "ArchiveParams":
        directory, member = os.path.split(os.fspath(params_file))
        config = read_config(directory, extracted_from(directory) or directory, member)
        if isinstance(params_overrides, dict):
            params_overrides = json.dumps(params_overrides)
        overrides = parse_overrides(params_overrides, ext_vars=ext_vars)
        return cls(with_overrides(config, overrides) if overrides else config)


def install() -> bool:
    import allennlp.models.archival as archival

    # `load_archive` looks both names up in this module when it runs.
    archival.extracted_archive = extracted_archive
    archival.Params = ArchiveParams
    return True
