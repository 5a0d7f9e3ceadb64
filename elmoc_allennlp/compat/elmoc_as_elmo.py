"""
A model-level `elmo` block with an ELMo-C `archive_file` builds `ElmocElmo`.

**Problem (allennlp 2.10.1).** `Elmo` is not `Registrable`, so a model-level `elmo` block
(allennlp-models' `bcn`) can only be built from ELMo's options and weight files.

**Workaround.** `Elmo.from_params` builds `ElmocElmo` when the block has an `archive_file`
(`options_file` / `weight_file` beside it are an error); other blocks are built by allennlp's.
Why process-wide: the block names no type, so only `Elmo.from_params` sees it; a stock block
(no `archive_file`, which `Elmo` does not take) is built exactly as before.

**To drop it**: when `Elmo` is `Registrable`, register `ElmocElmo` instead.
"""
from allennlp.common import Params
from allennlp.modules.elmo import Elmo

from elmoc_allennlp.common.shims import installer

REPLACES = "an `Elmo` block with an ELMo-C archive_file builds ElmocElmo (bcn's elmo)"


def _from_params(original, cls, params, constructor_to_call=None, constructor_to_inspect=None, **extras):
    from elmoc_allennlp.downstream.archive import naming_the_config_key
    from elmoc_allennlp.downstream.elmoc import ElmocElmo
    from elmoc_allennlp.downstream.token_embedder import reject_elmo_only_options

    if cls is Elmo and isinstance(params, Params) and "archive_file" in params:
        reject_elmo_only_options(params)
        with naming_the_config_key(params):
            return original(ElmocElmo, params, **extras)
    return original(
        cls, params, constructor_to_call=constructor_to_call, constructor_to_inspect=constructor_to_inspect, **extras
    )


_GUARDS = {"allennlp.modules.elmo.Elmo.from_params": _from_params}
TARGETS = tuple(_GUARDS)
install = installer(_GUARDS)
