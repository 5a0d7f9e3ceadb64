"""
The input kinds of the biLMs this project pretrains (training_configs/pretrain/), read from an
archive's `config.json`: which text field key feeds the encoder and what its indexer makes. Used by
`ElmocArchive`, the `elmoc_bilm_inputs` indexer and `ElmocBiLm` to run any of them downstream.

| kind         | pretraining configs                        | embedder / indexer                          |
|--------------|--------------------------------------------|---------------------------------------------|
| `fasttext`   | ELMo-C and its ablations, ELMo-A, Sampled  | `elmoc_fasttext` / `elmoc_fasttext_subwords` |
| `characters` | ELMo, the Table 3 CNN-input rows           | `character_encoding` / `elmo_characters`    |
| `pieces`     | ELMo-Sub                                   | `embedding` / `single_id` after the         |
|              |                                            | `elmoc_sentencepiece_bpe` tokenizer         |
"""
from typing import Any, Dict, Tuple, Type

from allennlp.common import Registrable
from allennlp.common.checks import ConfigurationError

FASTTEXT_INPUT = "fasttext"
CHARACTERS_INPUT = "characters"
PIECES_INPUT = "pieces"
INPUT_KINDS = (FASTTEXT_INPUT, CHARACTERS_INPUT, PIECES_INPUT)

FASTTEXT_EMBEDDER_TYPE = "elmoc_fasttext"
FASTTEXT_INDEXER_TYPE = "elmoc_fasttext_subwords"
CHARACTERS_EMBEDDER_TYPE = "character_encoding"
CHARACTERS_INDEXER_TYPE = "elmo_characters"
PIECES_EMBEDDER_TYPE = "embedding"
PIECES_INDEXER_TYPE = "single_id"
PIECES_TOKENIZER_TYPE = "elmoc_sentencepiece_bpe"

# (embedder type, indexer type) of each kind.
_KIND_TYPES = {
    FASTTEXT_INPUT: (FASTTEXT_EMBEDDER_TYPE, FASTTEXT_INDEXER_TYPE),
    CHARACTERS_INPUT: (CHARACTERS_EMBEDDER_TYPE, CHARACTERS_INDEXER_TYPE),
    PIECES_INPUT: (PIECES_EMBEDDER_TYPE, PIECES_INDEXER_TYPE),
}


def registered_as(base: Type[Registrable], name: Any, registered_name: str) -> bool:
    """
    Whether the config type `name` means the class registered as `registered_name` (its dotted
    class name counts too).
    """
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
    `empty`, and what kind of input that is (see the module docstring). Anything else is a
    `ConfigurationError` naming the config key.
    """
    from allennlp.data import TokenIndexer, Tokenizer
    from allennlp.modules.token_embedders import TokenEmbedder

    model = config["model"]
    embedders = model.get("text_field_embedder", {}).get("token_embedders", {})
    used = {key: _type_of(spec) for key, spec in embedders.items() if _type_of(spec) != "empty"}
    supported = ", ".join(f"'{embedder}' ({kind})" for kind, (embedder, _) in _KIND_TYPES.items())
    if len(used) != 1:
        raise ConfigurationError(
            f"biLM archive {archive_file}: model.text_field_embedder.token_embedders are {used}; "
            f"downstream use needs a biLM with exactly one input token embedder, one of {supported}"
        )
    key, embedder_type = next(iter(used.items()))
    kinds = [
        kind
        for kind, (embedder, _) in _KIND_TYPES.items()
        if registered_as(TokenEmbedder, embedder_type, embedder)
    ]
    if not kinds:
        raise ConfigurationError(
            f"biLM archive {archive_file}: model.text_field_embedder.token_embedders.{key} is a "
            f"{embedder_type!r} embedder; downstream use supports {supported}"
        )
    kind = kinds[0]
    reader = config.get("dataset_reader", {})
    indexer_type = _type_of(reader.get("token_indexers", {}).get(key))
    expected_indexer = _KIND_TYPES[kind][1]
    if not registered_as(TokenIndexer, indexer_type, expected_indexer):
        raise ConfigurationError(
            f"biLM archive {archive_file}: dataset_reader.token_indexers.{key} must be a "
            f"'{expected_indexer}' indexer for its '{embedder_type}' input (it is {indexer_type!r})"
        )
    if kind == PIECES_INPUT:
        tokenizer_type = _type_of(reader.get("tokenizer"))
        if not registered_as(Tokenizer, tokenizer_type, PIECES_TOKENIZER_TYPE):
            raise ConfigurationError(
                f"biLM archive {archive_file}: a word-piece input ({key}) needs the "
                f"'{PIECES_TOKENIZER_TYPE}' tokenizer at dataset_reader.tokenizer to split words "
                f"into its pieces (it is {tokenizer_type!r})"
            )
    return key, kind
