"""
A model-level `elmo` block with an ELMo-C `archive_file` builds `ElmocElmo`.

**Problem (allennlp 2.10.1).** `Elmo` is not `Registrable`, so a model-level `elmo` block
(allennlp-models' `bcn`) can only be built from ELMo's options and weight files.

**Workaround.** `install()` gives `Elmo` a `from_params` that builds `ElmocElmo` (same options plus
ELMo-C's) when the block has an `archive_file` (`options_file` / `weight_file` beside it are an
error); other blocks are built by allennlp's. Why process-wide: the block names no type, so only
`Elmo.from_params` sees it; a stock block (no `archive_file`, which `Elmo` does not take) is built
exactly as before.

**To drop it**: when `Elmo` is `Registrable`, register `ElmocElmo`, remove this module and its
entry in `elmoc_allennlp.compat.SHIMS`.
"""
from allennlp.common import Params
from allennlp.modules.elmo import Elmo

from elmoc_allennlp.common.shims import install_shim

REPLACES = "an `Elmo` block with an ELMo-C archive_file builds ElmocElmo (bcn's elmo)"
TARGETS = ("allennlp.modules.elmo.Elmo.from_params",)


def _elmoc_from_params(allennlp_from_params):
    def from_params(cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras):
        from elmoc_allennlp.downstream.archive import naming_the_config_key
        from elmoc_allennlp.downstream.elmoc import ElmocElmo
        from elmoc_allennlp.downstream.token_embedder import reject_elmo_only_options

        if cls is Elmo and isinstance(params, Params) and "archive_file" in params:
            reject_elmo_only_options(params)
            with naming_the_config_key(params):
                return allennlp_from_params(ElmocElmo, params, **extras)
        return allennlp_from_params(
            cls,
            params,
            constructor_to_call=constructor_to_call,
            constructor_to_inspect=constructor_to_inspect,
            **extras,
        )

    return from_params


def install() -> bool:
    install_shim(Elmo, "from_params", _elmoc_from_params)
    return True
