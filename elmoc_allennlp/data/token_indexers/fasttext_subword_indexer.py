from functools import lru_cache
from typing import Dict, List, Optional, Tuple

import torch

from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import Vocabulary

from elmoc_allennlp.common.fasttext_location import locate_fasttext
from elmoc_allennlp.common.fasttext_vectors import FastTextVectors, mean_subword_vectors, no_vector_id
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import MAX_TOKEN_CHARACTERS, BilmInputIndexer


@TokenIndexer.register("elmoc_fasttext_subwords")
class FastTextSubwordIndexer(BilmInputIndexer):
    """
    Represents each token by the fastText rows its vector is the mean of, + 1 (0 is padding):
    `subword_ids` `(num_tokens, num_subwords)`, `mask` and, with `gather_vectors`, the tokens'
    `vectors` `(num_tokens, dim)`. The boundary tokens are `</s>` (if the model has it); a token
    with no rows gets `no_vector_id` (`num_rows + 1`), which the `elmoc_fasttext` embedder zeros.

    Registered as a `TokenIndexer` with name "elmoc_fasttext_subwords".

    # Parameters

    vectors_path : `str`
        The fastText `.bin` model; use the same one for the `elmoc_fasttext` token embedder.
    boundary_tokens : `List[str]`, optional (default=`["<S>", "</S>"]`)
        Token texts indexed as fastText's `</s>`.
    lowercase_tokens : `bool`, optional (default=`False`)
        Lowercase each token (not the boundary tokens): for models trained on lowercased text.
    token_min_padding_length : `int`, optional (default=`0`)
        The least number of tokens a batch is padded to (allennlp `TokenIndexer`'s), for models
        whose encoder needs a minimum length (a CNN's widest filter); `0`: none.
    gather_vectors : `bool`, optional (default=`False`)
        Also output each token's vector, for a frozen `elmoc_fasttext` embedder.
    serialization_dir : `str`, optional (default=`None`)
        Given by allennlp when loading an archive: a missing `vectors_path` is looked for next to it.
    max_token_characters : `int`, optional (default=`50`, ELMo's)
        A longer token is indexed as its first `max_token_characters` characters.
    """

    ids_key = "subword_ids"
    length_keys = ("num_tokens", "num_subwords")

    def __init__(
        self,
        vectors_path: str,
        boundary_tokens: List[str] = ["<S>", "</S>"],  # never mutated
        lowercase_tokens: bool = False,
        token_min_padding_length: int = 0,
        gather_vectors: bool = False,
        serialization_dir: Optional[str] = None,
        max_token_characters: int = MAX_TOKEN_CHARACTERS,
    ) -> None:
        super().__init__(lowercase_tokens, max_token_characters, token_min_padding_length)
        self.gather_vectors = gather_vectors
        self.boundary_tokens = list(boundary_tokens)
        vectors_path = locate_fasttext(str(vectors_path), serialization_dir)
        self.vectors = FastTextVectors.from_path(vectors_path)
        self.no_vector_id = no_vector_id(self.vectors)
        eos_id = self.vectors.word_id(self.vectors.eos_word)
        self._eos_ids = (eos_id + 1,) if eos_id >= 0 else None
        self._make_cache()

    def _make_cache(self) -> None:
        self._ids_of = lru_cache(maxsize=self.vectors.subword_cache_size)(self._compute_ids)

    # The vectors pickle by path; the cache is rebuilt (an lru_cache cannot be pickled).
    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_ids_of"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._make_cache()

    def __eq__(self, other) -> bool:
        if isinstance(other, FastTextSubwordIndexer):
            return self.__getstate__() == other.__getstate__()
        return NotImplemented

    def _compute_ids(self, text: str) -> Tuple[int, ...]:
        if self._eos_ids is not None and text in self.boundary_tokens:
            return self._eos_ids
        ids = self.vectors.subword_ids_tuple(self._lowered(text))
        if not ids:
            return (self.no_vector_id,)
        return tuple(i + 1 for i in ids)

    def tokens_to_indices(self, tokens: List[Token], vocabulary: Vocabulary) -> IndexedTokenList:
        return {**super().tokens_to_indices(tokens, vocabulary), "mask": [True] * len(tokens)}

    def get_empty_token_list(self) -> IndexedTokenList:
        return {"subword_ids": [], "mask": []}

    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: Dict[str, int]
    ) -> Dict[str, torch.Tensor]:
        tensors = super().as_padded_tensor_dict(tokens, padding_lengths)
        tensors["mask"] = torch.arange(padding_lengths["num_tokens"]) < len(tokens["subword_ids"])
        if self.gather_vectors:
            # One stat per instance: the table must be the one the run started with.
            self.vectors.check_unchanged()
            tensors["vectors"] = mean_subword_vectors(self.vectors, tensors["subword_ids"])
        return tensors
