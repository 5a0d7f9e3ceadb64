"""`elmoc_bilm_inputs`: the token indexer of a trained biLM archive, for downstream models."""
from typing import Optional

from allennlp.common import Params
from allennlp.data.token_indexers.token_indexer import TokenIndexer

from elmoc_allennlp.data.token_indexers.bilm_input_indexers import BilmInputIndexer
from elmoc_allennlp.downstream.archive import BilmArchive, naming_the_config_key


@TokenIndexer.register("elmoc_bilm_inputs", constructor="from_archive")
class BilmArchiveIndexer(TokenIndexer):
    """
    Indexes tokens for a trained biLM, in the role of ELMo's `elmo_characters`: `from_archive`
    returns the indexer of the archive's input kind (fastText subwords, ELMo's characters or BPE
    pieces; see `input_kinds`), which indexes as pretraining did, so that it and the
    `elmoc_token_embedder` always agree (as allennlp's `from_archive` model returns the archive's
    model). Long tokens are cut as in pretraining. The output has the single key `elmo_tokens`
    and no `mask`.

    Registered as a `TokenIndexer` with name "elmoc_bilm_inputs".

    # Parameters

    archive_file : `str`
        The ELMo-C biLM `model.tar.gz` (the same as the `elmoc_token_embedder`'s).
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if it is not where the archive says.
    lowercase_tokens : `bool`, optional (default = `None`)
        Whether to lowercase tokens; `None` means as in pretraining.
    token_min_padding_length : `int`, optional (default = `0`)
        See :class:`TokenIndexer`.
    serialization_dir : `str`, optional (default = `None`)
        Given by allennlp when loading a downstream archive: its carried biLM config is read
        instead of `archive_file` (see `downstream/archive.py`).
    """

    @classmethod
    def from_archive(
        cls,
        archive_file: str,
        vectors_path: Optional[str] = None,
        lowercase_tokens: Optional[bool] = None,
        token_min_padding_length: int = 0,
        serialization_dir: Optional[str] = None,
    ) -> BilmInputIndexer:
        archive = BilmArchive.open(archive_file, vectors_path, serialization_dir)
        return archive.input_kind.indexer(archive, lowercase_tokens, token_min_padding_length)

    @classmethod
    def from_params(cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras):
        # Errors about the biLM archive name this indexer's config key.
        with naming_the_config_key(params):
            return super().from_params(
                params,
                constructor_to_call=constructor_to_call,
                constructor_to_inspect=constructor_to_inspect,
                **extras,
            )
