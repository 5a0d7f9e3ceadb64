"""
Options of the allennlp blocks that ELMo-C replaces (`elmo_token_embedder`, `bcn`'s `elmo`,
`bidirectional_lm_token_embedder`) that have no ELMo-C meaning: a swapped config fails saying
what to change instead of allennlp's bare "Extra parameters passed to ...".
"""
from typing import Optional, Sequence

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError


def reject_elmo_only_options(params: Params) -> None:
    """
    Raises a `ConfigurationError` naming the key for ELMo's `options_file`, `weight_file` and
    `vocab_to_cache` (no word cache: the fastText input is a lookup); removes a `vocab_to_cache: null`.
    """
    present = [f"{params.history}{key}" for key in ("options_file", "weight_file") if key in params]
    if present:
        raise ConfigurationError(
            f"ELMo-C takes archive_file; remove options_file and weight_file ({', '.join(present)})"
        )
    if params.pop("vocab_to_cache", None) is not None:
        raise ConfigurationError(f"{params.history}vocab_to_cache: ELMo-C has no word cache; remove it")


def check_boundary_tokens(
    bos_eos_tokens: Optional[Sequence[str]], start_token: str, end_token: str, archive_file: str
) -> None:
    """
    `bos_eos_tokens` (of `bidirectional_lm_token_embedder`) must be the boundaries the biLM was
    trained with (its `dataset_reader.start_token` / `end_token`), which ELMo-C adds itself.
    """
    if bos_eos_tokens is not None and list(bos_eos_tokens) != [start_token, end_token]:
        raise ConfigurationError(
            f"bos_eos_tokens is {list(bos_eos_tokens)}, but the ELMo-C biLM {archive_file} was "
            f"pretrained with [{start_token!r}, {end_token!r}]: leave bos_eos_tokens out"
        )
