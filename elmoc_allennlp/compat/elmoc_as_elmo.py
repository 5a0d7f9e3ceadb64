"""
An `Elmo` block in a config builds ELMo-C when it names an ELMo-C `archive_file`.

**Problem (allennlp 2.10.1 / allennlp-models 2.10.1).** Models that take ELMo as a model-level
argument typed as allennlp's `Elmo` (allennlp-models' `bcn`: `"elmo": {"options_file": ...,
"weight_file": ..., "num_output_representations": ...}`) build it with `Elmo.from_params`, which
only knows ELMo's options and weight files: `Elmo` is not `Registrable`, so a config cannot pick
another class with `"type"`. ELMo-C's `ElmocElmo` *is* an `Elmo`, but a config could not ask for
it, so BCN's ELMo at the integrator output (`use_integrator_output_elmo`) was out of reach.

**Workaround.** `install()` gives `Elmo` a `from_params` that builds `ElmocElmo` (with the same
options: `num_output_representations`, `do_layer_norm`, `dropout`, `requires_grad`,
`keep_sentence_boundaries`, `scalar_mix_parameters`, plus ELMo-C's, e.g. `projection_dim`) when the block has an
`archive_file`; `options_file` and `weight_file` next to it are a `ConfigurationError` ("ELMo-C
takes archive_file; remove options_file and weight_file"). A block without `archive_file` is
built by allennlp's own `from_params`, unchanged.

**To drop it**: if allennlp's `Elmo` becomes `Registrable` (configs could then say
`"type": "elmoc"`), register `ElmocElmo` instead and delete this module and its entry in
`elmoc_allennlp.compat.SHIMS`.
"""
from allennlp.common import Params
from allennlp.modules.elmo import Elmo

REPLACES = "an `Elmo` block with an ELMo-C archive_file builds ElmocElmo (bcn's elmo)"
TARGETS = ("allennlp.modules.elmo.Elmo.from_params",)

_ARCHIVE_KEY = "archive_file"


def _elmo_from_params(
    cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras
):
    from elmoc_allennlp.common.config_keys import naming_the_config_key
    from elmoc_allennlp.modules.elmo_block_options import reject_elmo_only_options
    from elmoc_allennlp.modules.elmoc import ElmocElmo

    allennlp_from_params = _elmo_from_params.allennlp_from_params
    if cls is Elmo and isinstance(params, Params) and _ARCHIVE_KEY in params:
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


def install() -> bool:
    """Gives `Elmo` the `from_params` above (idempotent)."""
    if "from_params" in vars(Elmo):
        return True
    _elmo_from_params.allennlp_from_params = Elmo.from_params.__func__
    Elmo.from_params = classmethod(_elmo_from_params)
    return True
