"""
allennlp 2.10.1 problem: `load_archive` (so `allennlp evaluate` / `predict`, `Model.from_archive`,
`from_archive` models, the `pretrained` initializer) extracts with `tarfile.extractall` and no
filter (absolute or `..` names and links write anywhere; a 4 MB archive can fill the disk), leaves
its temporary folder behind when extraction fails, and reads the archive's `config.json` with
`Params.from_file`: as jsonnet, with every environment variable as an external variable
(`importstr` of a local file, `std.extVar` of a token, a computation that never ends), importing
any dotted `"type"` it names.

`install()` replaces `allennlp.models.archival.extracted_archive` with
`elmoc_allennlp.common.archives.extracted_archive` (every member checked and bounded before it is
written, the folder removed after any failure) and the module's `Params` with `ArchiveParams`,
whose `from_file` reads the archive's config as strict JSON through
`elmoc_allennlp.common.archives.read_config` (a dotted type must be registered or already
imported) and then applies the user's overrides as allennlp does. To drop it: once allennlp
extracts with bounds and a filter and reads archived configs as JSON, delete this module and its
name in `SHIMS`.
"""
import json
import os

from allennlp.common.params import Params, parse_overrides, with_overrides

from elmoc_allennlp.common.archives import extracted_archive, extracted_from, read_config

REPLACES = (
    "archives are extracted checked and bounded; their config.json is strict JSON, never "
    "jsonnet, and names no type that would need an import"
)
TARGETS = (
    "allennlp.models.archival.extracted_archive",
    "allennlp.models.archival.Params",
)


class ArchiveParams(Params):
    """`Params` whose `from_file` reads an archived `config.json` (see the module docstring)."""

    @classmethod
    def from_file(cls, params_file, params_overrides="", ext_vars=None) -> "ArchiveParams":
        directory, member = os.path.split(os.fspath(params_file))
        config = read_config(directory, extracted_from(directory) or directory, member)
        if isinstance(params_overrides, dict):
            params_overrides = json.dumps(params_overrides)
        overrides = parse_overrides(params_overrides, ext_vars=ext_vars)
        return cls(with_overrides(config, overrides) if overrides else config)


def install() -> bool:
    """Makes `load_archive` extract and read archives as data (idempotent)."""
    import allennlp.models.archival as archival

    # `load_archive` looks both names up in this module when it runs.
    archival.extracted_archive = extracted_archive
    archival.Params = ArchiveParams
    return True
