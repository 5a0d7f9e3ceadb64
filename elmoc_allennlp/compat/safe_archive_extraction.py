"""
allennlp 2.10.1 problem: `allennlp.models.archival.extracted_archive` (used by `load_archive`, so by
`allennlp evaluate` / `predict`, `Model.from_archive`, `from_archive` models in configs, and the
`pretrained` initializer) calls `tarfile.extractall` without a filter. A crafted `model.tar.gz`
whose members are named `/abs/path/x` or `../../x`, or are links pointing outside, writes files
anywhere the user can write; a truncated one raises a bare `EOFError` naming no file and leaves
its `/tmp/tmpXXXX` folder behind (`load_archive` only removes the folder once the extraction
has returned).

`install()` replaces that function with `elmoc_allennlp.common.archives.extracted_archive`: same
signature and behaviour for a sound archive; every member is checked before it is written
(Python's `tarfile` `data` filter rules, no absolute names, no `..`, no devices, no links
leaving the folder), and a refused member or a damaged archive raises a `ConfigurationError`
naming the archive (and the member), with the temporary folder removed. It is installed when
`elmoc_allennlp` is imported, which `--include-package elmoc_allennlp` or a `.allennlp_plugins`
file does before any command runs, so it protects every archive those commands open, ELMo-C's
or not.

To drop it: once allennlp extracts with a filter and cleans up after a failed extraction
(Python 3.14 makes `data` the default filter, which fixes the first half only), delete this
module and its `install()` call in `elmoc_allennlp/__init__.py`.
"""
from elmoc_allennlp.common.archives import extracted_archive


REPLACES = "archives are extracted safely (no member outside the folder, damaged archives named)"
TARGETS = ("allennlp.models.archival.extracted_archive",)


def install() -> bool:
    """Makes allennlp's archive extraction safe (idempotent)."""
    import allennlp.models.archival as archival

    # `load_archive` and the `pretrained` initializer look the name up in this module when
    # they run, so replacing the module attribute reaches them all.
    archival.extracted_archive = extracted_archive
    return True
