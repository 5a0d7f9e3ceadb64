"""
The options of the allennlp blocks that ELMo-C replaces (`elmo_token_embedder`, `bcn`'s `elmo`,
allennlp-models' `bidirectional_lm_token_embedder`), checked where they have no ELMo-C meaning,
so that a swapped config fails with what to change instead of allennlp's bare
"Extra parameters passed to ...".

Options with an ELMo-C meaning are constructor arguments of `ElmocTokenEmbedder` /
`ElmocElmo`: `do_layer_norm`, `dropout`, `requires_grad`, `projection_dim`,
`scalar_mix_parameters`, `num_output_representations`, `keep_sentence_boundaries`,
`bos_eos_tokens` and `remove_bos_eos` (see `check_boundary_tokens`).
"""
from typing import Optional, Sequence

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError

ELMO_FILE_KEYS = ("options_file", "weight_file")


def _where(params: Params, key: str) -> str:
    return f"{params.history}{key}"


def reject_elmo_only_options(params: Params) -> None:
    """
    Raises a `ConfigurationError` naming the config key for options of ELMo's blocks that
    ELMo-C has no use for; removes a `vocab_to_cache: null`.
    """
    present = [key for key in ELMO_FILE_KEYS if key in params]
    if present:
        keys = ", ".join(_where(params, key) for key in present)
        raise ConfigurationError(
            f"ELMo-C takes archive_file; remove options_file and weight_file ({keys}): an ELMo-C "
            "biLM is one model.tar.gz (training_configs/pretrain/), whose archive_file replaces "
            "both"
        )
    if "vocab_to_cache" in params:
        if params.get("vocab_to_cache") is not None:
            raise ConfigurationError(
                f"{_where(params, 'vocab_to_cache')}: ELMo-C has no word cache (ELMo caches the "
                "character-CNN vectors of a vocabulary; ELMo-C's fastText input is a lookup "
                "already); remove vocab_to_cache"
            )
        params.pop("vocab_to_cache")


def check_boundary_tokens(
    bos_eos_tokens: Optional[Sequence[str]], start_token: str, end_token: str, archive_file: str
) -> None:
    """
    `bos_eos_tokens` (of `bidirectional_lm_token_embedder`) are the sentence boundaries the
    language model was trained with. ELMo-C adds its biLM's own (the archive's
    `dataset_reader.start_token` / `end_token`), so other tokens are a `ConfigurationError`.
    """
    if bos_eos_tokens is None:
        return
    if list(bos_eos_tokens) != [start_token, end_token]:
        raise ConfigurationError(
            f"bos_eos_tokens is {list(bos_eos_tokens)}, but the ELMo-C biLM {archive_file} was "
            f"pretrained with [{start_token!r}, {end_token!r}] (its dataset_reader.start_token "
            "and end_token), which ELMo-C adds itself: leave bos_eos_tokens out or give those"
        )

