"""`elmoc_bilm_inputs`: the token indexer of a trained biLM archive, for downstream models."""
from typing import Optional

from allennlp.data.token_indexers.token_indexer import TokenIndexer

from elmoc_allennlp.data.token_indexers.bilm_input_indexers import BilmInputIndexer
from elmoc_allennlp.downstream.archive import BilmArchive, NamingTheConfigKey


@TokenIndexer.register("elmoc_bilm_inputs", constructor="from_archive")
class BilmArchiveIndexer(NamingTheConfigKey, TokenIndexer):
    """
    In the role of ELMo's `elmo_characters`: `from_archive` returns the indexer of the archive's input kind,
    indexing as pretraining did, with the one key `elmo_tokens` (no `mask`) the `elmoc_token_embedder` reads.

    Registered as a `TokenIndexer` with name "elmoc_bilm_inputs".

    # Parameters

    archive_file, vectors_path, serialization_dir
        As for `BilmArchive` (`archive_file`: the `elmoc_token_embedder`'s; `serialization_dir`: given by allennlp).
    lowercase_tokens : `bool`, optional (default = `None`)
        Whether to lowercase tokens; `None` means as in pretraining.
    token_min_padding_length : `int`, optional (default = `0`)
        See :class:`TokenIndexer`.
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
