from typing import Optional

from allennlp.data.token_indexers.token_indexer import TokenIndexer

from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.common.elmoc_archive import VECTORS_PATH_KEY, archive_with_its_fasttext


@TokenIndexer.register("elmoc_archive_fasttext")
class ArchiveFastTextIndexer(FastTextSubwordIndexer):
    """
    The `elmoc_fasttext_subwords` indexer a biLM archive was pretrained with (fastText model,
    boundary tokens, lowercasing), for fine-tuning the biLM (`elmoc_bilm_from_archive`).

    Registered as a `TokenIndexer` with name "elmoc_archive_fasttext".

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (the same as `elmoc_bilm_from_archive`'s).
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if the archive cannot find it (another model is refused).
    token_min_padding_length : `int`, optional (default = `0`)
        See :class:`TokenIndexer`.
    """

    def __init__(
        self,
        archive_file: str,
        vectors_path: Optional[str] = None,
        token_min_padding_length: int = 0,
    ) -> None:
        archive = archive_with_its_fasttext(
            archive_file, vectors_path, "dataset_reader.token_indexers.<key>.vectors_path"
        )
        key = archive.input_key
        indexer_vectors = archive.vectors_overrides[
            f"dataset_reader.token_indexers.{key}.{VECTORS_PATH_KEY}"
        ]
        super().__init__(
            vectors_path=indexer_vectors,
            boundary_tokens=archive.boundary_tokens,
            lowercase_tokens=archive.lowercase_tokens,
            token_min_padding_length=token_min_padding_length,
        )
