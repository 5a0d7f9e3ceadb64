"""
The base of the indexers of biLM input ids (see `elmoc_allennlp.downstream.input_kinds`), and
`indexed_batch`.
"""

from typing import Dict, List, Optional, Sequence

import numpy
import torch

from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import Vocabulary

from elmoc_allennlp.common.checks import check_positive

ELMO_TOKENS_KEY = "elmo_tokens"
# ELMo's cap on a token's length: a token's ids (n-grams, pieces) grow with its length.
MAX_TOKEN_CHARACTERS = 50


def padded_ids(rows: Sequence[Sequence[int]], num_rows: int, width: int) -> torch.LongTensor:
    """`(num_rows, width)` ids: each row left-aligned and cut to `width`, 0 padding."""
    rows = [row[:width] for row in rows[:num_rows]]
    lengths = numpy.fromiter((len(row) for row in rows), dtype=numpy.int64, count=len(rows))
    padded = numpy.zeros((num_rows, width), dtype=numpy.int64)
    filled = numpy.arange(width) < lengths[:, None]
    padded[: len(rows)][filled] = [index for row in rows for index in row]
    return torch.from_numpy(padded)


class BilmInputIndexer(TokenIndexer):
    """
    Base of the indexers of a biLM's input ids: `token_ids` cuts a token to `max_token_characters`,
    then the kind's `_ids_of` gives its ids. Output: `elmo_tokens` (ELMo's key, which `bcn` reads),
    `(num_tokens, width)`, 0 padding and a non-zero id in every real token.

    # Parameters

    lowercase_tokens : `bool`, optional (default = `False`)
        Lowercase a token before indexing it.
    max_token_characters : `int`, optional (default = `50`, ELMo's)
        A longer token is indexed as its first `max_token_characters` characters.
    token_min_padding_length : `int`, optional (default = `0`)
        See :class:`TokenIndexer`.
    """

    # The output key, and the padding-length keys of the tokens and of the ids per token.
    ids_key = ELMO_TOKENS_KEY
    length_keys = (ELMO_TOKENS_KEY, "num_ids")

    def __init__(
        self,
        lowercase_tokens: bool = False,
        max_token_characters: int = MAX_TOKEN_CHARACTERS,
        token_min_padding_length: int = 0,
    ) -> None:
        super().__init__(token_min_padding_length)
        check_positive(max_token_characters, "max_token_characters")
        self.max_token_characters = max_token_characters
        self.lowercase_tokens = lowercase_tokens

    def token_ids(self, text: str) -> List[int]:
        """The biLM input ids of a token with this text."""
        return list(self._ids_of(text[: self.max_token_characters]))

    def _ids_of(self, text: str) -> Sequence[int]:
        raise NotImplementedError

    def _lowered(self, text: str) -> str:
        return text.lower() if self.lowercase_tokens else text

    def count_vocab_items(self, token: Token, counter: Dict[str, Dict[str, int]]) -> None:
        pass  # vocabulary-free

    def tokens_to_indices(self, tokens: List[Token], vocabulary: Vocabulary) -> IndexedTokenList:
        return {self.ids_key: [self.token_ids(token.ensure_text()) for token in tokens]}

    def get_empty_token_list(self) -> IndexedTokenList:
        return {self.ids_key: []}

    def get_padding_lengths(self, indexed_tokens: IndexedTokenList) -> Dict[str, int]:
        rows = indexed_tokens[self.ids_key]
        num_tokens, num_ids = self.length_keys
        return {
            num_tokens: max(len(rows), self._token_min_padding_length),
            # At least 1, so that an all-padding batch still has a (num_tokens, 1) id tensor.
            num_ids: max((len(row) for row in rows), default=1),
        }

    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: Dict[str, int]
    ) -> Dict[str, torch.Tensor]:
        num_tokens, num_ids = (padding_lengths[key] for key in self.length_keys)
        return {self.ids_key: padded_ids(tokens[self.ids_key], num_tokens, num_ids)}


def indexed_batch(
    indexer: BilmInputIndexer, sentences: List[List[str]], device: Optional[torch.device] = None
) -> torch.LongTensor:
    """The padded ids `(batch_size, timesteps, width)` of tokenized sentences, as `batch_to_ids`."""
    rows = [[indexer.token_ids(token) for token in sentence] for sentence in sentences]
    timesteps = max((len(row) for row in rows), default=0)
    width = max((len(ids) for row in rows for ids in row), default=1)
    batch = torch.zeros(0, timesteps, width, dtype=torch.long)
    if rows:
        batch = torch.stack([padded_ids(row, timesteps, width) for row in rows])
    return batch if device is None else batch.to(device)
