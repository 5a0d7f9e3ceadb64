"""
The input kinds of the biLMs of training_configs/pretrain/, read from an archive's `config.json`:
`fasttext` (ELMo-C and its ablations), `characters` (ELMo) and `pieces` (ELMo-Sub, after the
`elmoc_sentencepiece_bpe` tokenizer).
"""
from typing import Any, Dict, Tuple, Type

from allennlp.common import Registrable
from allennlp.common.checks import ConfigurationError

FASTTEXT_INPUT = "fasttext"
CHARACTERS_INPUT = "characters"
PIECES_INPUT = "pieces"

# (embedder type, indexer type, tokenizer type or None) of each kind.
_KIND_TYPES = {
    FASTTEXT_INPUT: ("elmoc_fasttext", "elmoc_fasttext_subwords", None),
    CHARACTERS_INPUT: ("character_encoding", "elmo_characters", None),
    PIECES_INPUT: ("embedding", "single_id", "elmoc_sentencepiece_bpe"),
}


def registered_as(base: Type[Registrable], name: Any, registered_name: str) -> bool:
    """Whether the config type `name` (a registered or dotted name) means `registered_name`."""
    if not isinstance(name, str):
        return False
    try:
        return base.resolve_class_name(name)[0] is base.resolve_class_name(registered_name)[0]
    except ConfigurationError:
        return False


def _type_of(spec: Any) -> Any:
    return spec.get("type") if isinstance(spec, dict) else spec


def find_bilm_input(archive_file: str, config: Dict[str, Any]) -> Tuple[str, str]:
    """
    `(text field key, input kind)` of a biLM archive's config: its one token embedder that is not
    `empty`, and its kind. Anything else is a `ConfigurationError` naming the config key.
    """
    from allennlp.data import TokenIndexer, Tokenizer
    from allennlp.modules.token_embedders import TokenEmbedder

    embedders = config["model"].get("text_field_embedder", {}).get("token_embedders", {})
    used = {key: _type_of(spec) for key, spec in embedders.items() if _type_of(spec) != "empty"}
    supported = ", ".join(f"'{types[0]}' ({kind})" for kind, types in _KIND_TYPES.items())
    prefix = f"biLM archive {archive_file}: "
    if len(used) != 1:
        raise ConfigurationError(
            f"{prefix}model.text_field_embedder.token_embedders are {used}; downstream use "
            f"needs exactly one, of {supported}"
        )
    key, embedder_type = next(iter(used.items()))
    kinds = [k for k, t in _KIND_TYPES.items() if registered_as(TokenEmbedder, embedder_type, t[0])]
    if not kinds:
        raise ConfigurationError(
            f"{prefix}model.text_field_embedder.token_embedders.{key} is {embedder_type!r}, "
            f"not one of {supported}"
        )
    _, indexer, tokenizer = _KIND_TYPES[kinds[0]]
    reader = config.get("dataset_reader", {})
    indexer_type = _type_of(reader.get("token_indexers", {}).get(key))
    if not registered_as(TokenIndexer, indexer_type, indexer):
        raise ConfigurationError(
            f"{prefix}dataset_reader.token_indexers.{key} is {indexer_type!r}, not '{indexer}'"
        )
    tokenizer_type = _type_of(reader.get("tokenizer"))
    if tokenizer is not None and not registered_as(Tokenizer, tokenizer_type, tokenizer):
        raise ConfigurationError(
            f"{prefix}dataset_reader.tokenizer is {tokenizer_type!r}, not '{tokenizer}'"
        )
    return key, kinds[0]
