from typing import Dict, List, Optional

import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import Vocabulary

from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.common.bilm_inputs import FASTTEXT_INPUT
from elmoc_allennlp.common.config_keys import naming_the_config_key
from elmoc_allennlp.common.portable_bilm import read_bilm_archive
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import (
    non_fasttext_indexer,
    pretraining_token_cap,
)

ELMO_TOKENS_KEY = "elmo_tokens"


@TokenIndexer.register("elmoc_bilm_inputs", constructor="from_archive")
class BilmArchiveIndexer(FastTextSubwordIndexer):
    """
    Indexes tokens for a trained ELMo-C biLM, in the role of ELMo's `elmo_characters`: each token
    becomes the fastText subword ids (its input-matrix rows + 1, 0 for padding) of the fastText
    model the biLM was pretrained with, which is found from the biLM archive (see `ElmocArchive`),
    so that the indexer and the `elmoc_token_embedder` always agree. Like `elmo_characters` it
    needs no vocabulary, and it adds no sentence boundaries (the embedder does). Long tokens are
    cut as in pretraining: at the archive's indexer's `max_token_characters`, or its
    `elmoc_lm_corpus` reader's if that is shorter.

    The output has a single key, `elmo_tokens`, of shape `(num_tokens, num_subwords)` (the key of
    `elmo_characters`, so models that read ELMo's tensor by name, such as `bcn`, find it). There
    is no `mask` key, so it can sit next to an indexer that has one (e.g.
    `elmoc_fasttext_subwords`); `get_text_field_mask` derives the mask from the ids (every real
    token has a non-zero id).

    Registered as a `TokenIndexer` with name "elmoc_bilm_inputs", built by `from_archive`, which
    takes the indexer that matches the archive's input: this class for a fastText-input biLM
    (ELMo-C and its ablations), `ElmocCharacterIndexer` for a character-CNN biLM (ELMo) and
    `ElmocPieceIndexer` for a BPE-input biLM (ELMo-Sub), all with the same `elmo_tokens` output.

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
        if archive.input_kind != FASTTEXT_INPUT:
            raise ConfigurationError(
                f"biLM archive {archive_file} has {archive.input_kind} input (model."
                f"text_field_embedder.token_embedders.{archive.input_key}), not fastText: build "
                "the indexer with BilmArchiveIndexer.from_archive (the 'elmoc_bilm_inputs' type)"
            )
        super().__init__(
            vectors_path=archive.input_vectors_path,
            boundary_tokens=archive.boundary_tokens,
            lowercase_tokens=(
                archive.lowercase_tokens if lowercase_tokens is None else lowercase_tokens
            ),
            token_min_padding_length=token_min_padding_length,
            max_token_characters=pretraining_token_cap(archive),
        )
        self._archive_file = str(archive_file)

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

    @classmethod
    def from_archive(
        cls,
        archive_file: str,
        vectors_path: Optional[str] = None,
        lowercase_tokens: Optional[bool] = None,
        token_min_padding_length: int = 0,
        serialization_dir: Optional[str] = None,
    ) -> TokenIndexer:
        """The downstream indexer of any biLM archive (see the class docstring)."""
        archive = read_bilm_archive(archive_file, vectors_path, serialization_dir)
        if archive.input_kind == FASTTEXT_INPUT:
            return cls(
                archive_file,
                vectors_path,
                lowercase_tokens,
                token_min_padding_length,
                serialization_dir,
            )
        return non_fasttext_indexer(archive, bool(lowercase_tokens), token_min_padding_length)

    def __eq__(self, other) -> bool:
        if isinstance(other, BilmArchiveIndexer):
            return super().__eq__(other)
        return NotImplemented

    def tokens_to_indices(self, tokens: List[Token], vocabulary: Vocabulary) -> IndexedTokenList:
        return {ELMO_TOKENS_KEY: [self.token_ids(token.ensure_text()) for token in tokens]}

    def get_empty_token_list(self) -> IndexedTokenList:
        return {ELMO_TOKENS_KEY: []}

    def get_padding_lengths(self, indexed_tokens: IndexedTokenList) -> Dict[str, int]:
        return super().get_padding_lengths({"subword_ids": indexed_tokens[ELMO_TOKENS_KEY]})

    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: Dict[str, int]
    ) -> Dict[str, torch.Tensor]:
        padded = super().as_padded_tensor_dict(
            {"subword_ids": tokens[ELMO_TOKENS_KEY]}, padding_lengths
        )
        return {ELMO_TOKENS_KEY: padded["subword_ids"]}
