from typing import Any, Dict, Optional

from allennlp.data.token_indexers.token_indexer import TokenIndexer

from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.common.elmoc_archive import archive_with_its_fasttext
from elmoc_allennlp.common.elmoc_archive import VECTORS_PATH_KEY


@TokenIndexer.register("elmoc_archive_fasttext")
class ArchiveFastTextIndexer(FastTextSubwordIndexer):
    """
    The `fasttext_subwords` indexer that a biLM archive was pretrained with, rebuilt from the
    archive: same fastText model, same boundary tokens, same lowercasing. It indexes new text for
    fine-tuning the biLM (`elmoc_bilm_from_archive`), so the config never names the fastText
    model and cannot pick another one; its output is the pretraining indexer's (`subword_ids`,
    `mask`), which the biLM's `fasttext` token embedder reads.

    Like the archive's model, the fastText model is found as `ElmocArchive` finds it (the path in
    the archive's config, or relative to the archive). `vectors_path` is only for an archive whose
    model cannot be found: it must be a copy of that same model; a different fastText model is
    refused with a `ConfigurationError`.

    Registered as a `TokenIndexer` with name "elmoc_archive_fasttext".

    # Parameters

    archive_file : `str`
        The biLM's `model.tar.gz` (the same as `elmoc_bilm_from_archive`'s).
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if the archive cannot find it.
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
        self.archive = archive
        # The archive's own indexer config, pointing at the fastText file used here.
        self.pretraining_config: Dict[str, Any] = dict(
            archive.config["dataset_reader"]["token_indexers"][key]
        )
        self.pretraining_config[VECTORS_PATH_KEY] = indexer_vectors

    def __getstate__(self):
        # Data-loader workers need the indexer, not the archive's description.
        state = super().__getstate__()
        state["archive"] = None
        return state
