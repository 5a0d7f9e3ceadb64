"""
`elmoc_bilm_tied`, kept so that configs and archives written before `elmoc_bilm` took a
`tie_output_embedding` argument still load. New configs use `elmoc_bilm` with
`tie_output_embedding`.
"""
from allennlp.data import Vocabulary
from allennlp.models.model import Model

from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel


@Model.register("elmoc_bilm_tied")
class TiedBidirectionalLanguageModel(BidirectionalLanguageModel):
    """
    `elmoc_bilm` with a required `tie_output_embedding` (the same model as `elmoc_bilm` with
    that argument set).

    Registered as a `Model` with name "elmoc_bilm_tied".

    # Parameters

    tie_output_embedding : `str`
        The key, in `text_field_embedder`, of the `Embedding` to tie the output layer to. The
        other parameters are those of `elmoc_bilm`.
    """

    def __init__(self, vocab: Vocabulary, tie_output_embedding: str, **kwargs) -> None:
        super().__init__(vocab, tie_output_embedding=tie_output_embedding, **kwargs)
