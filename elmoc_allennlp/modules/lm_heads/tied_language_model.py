"""
A stop-gap until `elmoc_bilm` takes a `tie_output_embedding` argument: the biLM with its output
embedding tied to an input embedding, which the subword LM baseline (ELMo-Sub) needs.
"""
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.models.model import Model
from allennlp.modules import TextFieldEmbedder

from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel


def tie_output_embedding_to(
    text_field_embedder: TextFieldEmbedder, output_layer, embedder_key: str
) -> None:
    """
    Makes the `weight` of the token embedder `embedder_key` of `text_field_embedder` (an
    `Embedding` over the output layer's namespace) the output embedding of `output_layer`
    (which must have `tie_weights`, as the `softmax` head has).
    """
    token_embedders = getattr(text_field_embedder, "_token_embedders", {})
    embedder = token_embedders.get(embedder_key)
    if embedder is None or not hasattr(embedder, "weight"):
        raise ConfigurationError(
            f"model.tie_output_embedding is '{embedder_key}', but the text_field_embedder has no "
            f"embedding with that key (it has {sorted(token_embedders)})"
        )
    if not hasattr(output_layer, "tie_weights"):
        raise ConfigurationError(
            f"model.tie_output_embedding is set, but the output layer "
            f"({type(output_layer).__name__}) has no output embedding to tie"
        )
    output_layer.tie_weights(embedder.weight)


@Model.register("elmoc_bilm_tied")
class TiedBidirectionalLanguageModel(BidirectionalLanguageModel):
    """
    `elmoc_bilm` whose output layer shares its output embedding with an input embedding.

    Registered as a `Model` with name "elmoc_bilm_tied".

    # Parameters

    tie_output_embedding : `str`
        The key, in `text_field_embedder`, of the `Embedding` to tie the output layer to. The
        other parameters are those of `elmoc_bilm`.
    """

    def __init__(self, vocab: Vocabulary, tie_output_embedding: str, **kwargs) -> None:
        super().__init__(vocab, **kwargs)
        tie_output_embedding_to(self._text_field_embedder, self._output_layer, tie_output_embedding)
