from typing import List, Optional

from allennlp.common import Params
from allennlp.data.token_indexers.token_indexer import TokenIndexer

from elmoc_allennlp.common.config_keys import naming_the_config_key
from elmoc_allennlp.common.portable_bilm import read_bilm_archive
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import (
    BilmInputIndexer,
    archive_input_indexer,
)


@TokenIndexer.register("elmoc_bilm_inputs")
class BilmArchiveIndexer(BilmInputIndexer):
    """
    Indexes tokens for a trained biLM, in the role of ELMo's `elmo_characters`: each token
    becomes the ids the biLM's input was pretrained on, whatever its kind (see
    `elmoc_allennlp.common.bilm_inputs`): the fastText subword ids of the biLM's own fastText
    model (ELMo-C and its ablations), ELMo's character ids (ELMo) or the BPE piece ids of its
    SentencePiece model and vocabulary (ELMo-Sub), all read from the biLM archive (see
    `ElmocArchive`), so that the indexer and the `elmoc_token_embedder` always agree
    (`kind_indexer` is the indexer of that kind). Like `elmo_characters` it needs no vocabulary
    and adds no sentence boundaries (the embedder does). Long tokens are cut as in pretraining:
    at the archive's indexer's `max_token_characters`, or its `elmoc_lm_corpus` reader's if that
    is shorter.

    The output has a single key, `elmo_tokens` (see `BilmInputIndexer`). There is no `mask` key,
    so it can sit next to an indexer that has one (e.g. `elmoc_fasttext_subwords`);
    `get_text_field_mask` derives the mask from the ids.

    Registered as a `TokenIndexer` with name "elmoc_bilm_inputs".

    # Parameters

    archive_file : `str`
        The ELMo-C biLM `model.tar.gz` (the same as the `elmoc_token_embedder`'s).
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if it is not where the archive says.
    lowercase_tokens : `bool`, optional (default = `None`)
        Whether to lowercase tokens; `None` means as in pretraining (the archive's
        `dataset_reader.token_indexers.<key>.lowercase_tokens`), which is what the biLM expects.
    token_min_padding_length : `int`, optional (default = `0`)
        See :class:`TokenIndexer`.
    serialization_dir : `str`, optional (default = `None`)
        Given by allennlp when loading a downstream archive: the biLM config it carries is read
        instead of `archive_file` (see `elmoc_allennlp/common/portable_bilm.py`).
    """

    def __init__(
        self,
        archive_file: str,
        vectors_path: Optional[str] = None,
        lowercase_tokens: Optional[bool] = None,
        token_min_padding_length: int = 0,
        serialization_dir: Optional[str] = None,
    ) -> None:
        archive = read_bilm_archive(archive_file, vectors_path, serialization_dir)
        self.input_kind = archive.input_kind
        self._archive_file = str(archive_file)
        self.kind_indexer = archive_input_indexer(archive, lowercase_tokens)
        super().__init__(
            self.kind_indexer.lowercase_tokens,
            self.kind_indexer.max_token_characters,
            token_min_padding_length,
        )

    @classmethod
    def from_params(
        cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras
    ):
        # Errors about the biLM archive name this indexer's config key.
        with naming_the_config_key(params):
            return super().from_params(
                params,
                constructor_to_call=constructor_to_call,
                constructor_to_inspect=constructor_to_inspect,
                **extras,
            )

    def token_ids(self, text: str) -> List[int]:
        return self.kind_indexer.token_ids(text)

    def __eq__(self, other) -> bool:
        if isinstance(other, BilmArchiveIndexer):
            return self.__dict__ == other.__dict__
        return NotImplemented
