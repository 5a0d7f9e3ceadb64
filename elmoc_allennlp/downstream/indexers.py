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

    archive_file : `str`
        The trained biLM: the `model.tar.gz` of its `allennlp train` run (or that run's folder, or a
        URL). A relative path resolves against the working directory, as allennlp's data paths do.
        The same as the `elmoc_token_embedder`'s.
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, where it is on this machine. `None`: the
        path the archive records, else its last 1-3 path components under the archive's folder and
        that folder's parent; `ELMOC_VECTORS_PATH`, if set, overrides both. It must be the biLM's
        own model (its fingerprint is recorded in the biLM's weights); a biLM whose input is not
        fastText takes none.
    lowercase_tokens : `bool`, optional (default = `None`)
        Whether to lowercase tokens. `None`: as the biLM's pretraining indexer did, which is what
        its fastText vectors expect (cased words in a lowercased fastText model get poor vectors).
    token_min_padding_length : `int`, optional (default = `0`)
        The least number of tokens a batch is padded to (allennlp `TokenIndexer`'s), for models
        whose encoder needs a minimum length (a CNN's widest filter); `0`: none.
    serialization_dir : `str`, optional (default = `None`)
        The downstream run's folder, given by allennlp (not in the config). A downstream archive
        carries a copy of the biLM (`elmoc_bilm/`): loading it reads that copy instead of
        `archive_file`, which may then be gone.
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
