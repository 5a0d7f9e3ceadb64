"""A model-level `elmo` block with an ELMo-C `archive_file` builds `ElmocElmo` (allennlp 2.10.1's `Elmo` is
not `Registrable`; docs/compat.md)."""

from allennlp.common import Params
from allennlp.modules.elmo import Elmo

from elmoc_allennlp.common.shims import installer

REPLACES = "an `Elmo` block with an ELMo-C archive_file builds ElmocElmo (bcn's elmo)"


def _from_params(
    original, cls, params, constructor_to_call=None, constructor_to_inspect=None, **extras
):
    from elmoc_allennlp.downstream.archive import naming_the_config_key
    from elmoc_allennlp.downstream.elmoc import ElmocElmo
    from elmoc_allennlp.downstream.token_embedder import reject_elmo_only_options

    if cls is Elmo and isinstance(params, Params) and "archive_file" in params:
        reject_elmo_only_options(params)
        with naming_the_config_key(params):
            return original(ElmocElmo, params, **extras)
    return original(
        cls,
        params,
        constructor_to_call=constructor_to_call,
        constructor_to_inspect=constructor_to_inspect,
        **extras,
    )


TARGETS, install = installer({"allennlp.modules.elmo.Elmo.from_params": _from_params})
