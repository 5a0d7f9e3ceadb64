"""
Where a token becomes biLM input ids (`BilmInputIndexer.token_ids`, the one place long tokens are
cut), and the downstream indexers for biLM archives whose input is not fastText, made by the
`elmoc_bilm_inputs` indexer from the archive (see `elmoc_allennlp.common.bilm_inputs`). Those give
`elmo_tokens` of shape `(num_tokens, width)`, 0 for padding and non-zero for every real token,
like ELMo's `elmo_characters`, so the `elmoc_token_embedder` and `ElmocBiLm` read every kind the
same way.
"""
from typing import Dict, List, Optional, Sequence

import numpy

import torch

from allennlp.common.checks import ConfigurationError
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper
from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import Vocabulary

from elmoc_allennlp.common.checks import check_positive

ELMO_TOKENS_KEY = "elmo_tokens"
# ELMo's cap on a token's length (allennlp's `ELMoCharacterMapper.max_word_length`): a token's ids
# (its fastText n-grams, its BPE pieces) grow with its length, so an unbounded token would cost
# unbounded memory.
MAX_TOKEN_CHARACTERS = 50


def padded_ids(rows: Sequence[Sequence[int]], num_rows: int, width: int) -> torch.LongTensor:
    """`(num_rows, width)` ids: each row left-aligned and cut to `width`, 0 padding."""
    rows = [row[:width] for row in rows[:num_rows]]
    lengths = numpy.fromiter((len(row) for row in rows), dtype=numpy.int64, count=len(rows))
    padded = numpy.zeros((num_rows, width), dtype=numpy.int64)
    filled = numpy.arange(width) < lengths[:, None]
    padded[: len(rows)][filled] = [index for row in rows for index in row]
    return torch.from_numpy(padded)


def pretraining_token_cap(archive) -> int:
    """
    Where a biLM archive's pretraining cut tokens (`ElmocArchive`): its input indexer's
    `max_token_characters`, or its `elmoc_lm_corpus` reader's if that is shorter.
    """
    indexer = archive.config["dataset_reader"]["token_indexers"][archive.input_key]
    indexer_limit = indexer.get("max_token_characters", MAX_TOKEN_CHARACTERS)
    limits = (archive.max_token_characters, indexer_limit)
    return min(limit for limit in limits if limit is not None)


class BilmInputIndexer(TokenIndexer):
    """
    Base of the indexers that turn a token into a biLM's input ids (fastText subwords, ELMo's
    characters, BPE pieces): `token_ids` cuts the token to `max_token_characters` and lowercases
    it if asked, then the kind's `_ids_of` gives its ids. Every way text reaches a biLM (the
    corpus reader, the downstream indexer, the predictor, `ElmocEmbedder`, `allennlp
    elmoc-embed`) goes through it, so a token's ids are bounded. The output is `elmo_tokens`,
    `(num_tokens, width)` with 0 padding and a non-zero id in every real token (ELMo's key, so
    models that read ELMo's tensor by name, such as `bcn`, find it).

    # Parameters

    lowercase_tokens : `bool`, optional (default = `False`)
        Lowercase a token before indexing it.
    max_token_characters : `int`, optional (default = `50`, ELMo's)
        A longer token is indexed as its first `max_token_characters` characters.
    token_min_padding_length : `int`, optional (default = `0`)
        See :class:`TokenIndexer`.
    """

    def __init__(
        self,
        lowercase_tokens: bool = False,
        max_token_characters: int = MAX_TOKEN_CHARACTERS,
        token_min_padding_length: int = 0,
    ) -> None:
        super().__init__(token_min_padding_length)
        check_positive(max_token_characters, "max_token_characters")
        self.max_token_characters = max_token_characters
        self._lowercase_tokens = lowercase_tokens

    @property
    def lowercase_tokens(self) -> bool:
        return self._lowercase_tokens

    def token_ids(self, text: str) -> List[int]:
        """The biLM input ids of a token with this text."""
        return list(self._ids_of(text[: self.max_token_characters]))

    def _ids_of(self, text: str) -> Sequence[int]:
        raise NotImplementedError

    def _lowered(self, text: str) -> str:
        return text.lower() if self._lowercase_tokens else text

    def count_vocab_items(self, token: Token, counter: Dict[str, Dict[str, int]]) -> None:
        pass  # vocabulary-free

    def tokens_to_indices(self, tokens: List[Token], vocabulary: Vocabulary) -> IndexedTokenList:
        return {ELMO_TOKENS_KEY: [self.token_ids(token.ensure_text()) for token in tokens]}

    def get_empty_token_list(self) -> IndexedTokenList:
        return {ELMO_TOKENS_KEY: []}

    def get_padding_lengths(self, indexed_tokens: IndexedTokenList) -> Dict[str, int]:
        rows = indexed_tokens[ELMO_TOKENS_KEY]
        return {
            ELMO_TOKENS_KEY: max(len(rows), self._token_min_padding_length),
            "num_ids": max((len(row) for row in rows), default=1),
        }

    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: Dict[str, int]
    ) -> Dict[str, torch.Tensor]:
        rows, width = tokens[ELMO_TOKENS_KEY], padding_lengths["num_ids"]
        return {ELMO_TOKENS_KEY: padded_ids(rows, padding_lengths[ELMO_TOKENS_KEY], width)}


class ElmocCharacterIndexer(BilmInputIndexer):
    """
    The `elmo_characters` ids (ELMo's 50 character ids per token, + 1) of a character-CNN-input
    biLM (ELMo, training_configs/pretrain/elmo.jsonnet). `<S>` / `</S>` are ELMo's boundary
    characters, as in pretraining. Parameters as `BilmInputIndexer`'s.
    """

    def __init__(self, lowercase_tokens: bool = False, token_min_padding_length: int = 0) -> None:
        super().__init__(lowercase_tokens, token_min_padding_length=token_min_padding_length)
        self._mapper = ELMoCharacterMapper()

    def _ids_of(self, text: str) -> List[int]:
        return self._mapper.convert_word_to_char_ids(self._lowered(text))


class ElmocPieceIndexer(BilmInputIndexer):
    """
    The BPE pieces of each token for a subword-input biLM (ELMo-Sub,
    training_configs/pretrain/elmo_sub.jsonnet): its SentencePiece model splits each word (as the
    pretraining tokenizer did) and the archive's vocabulary gives each piece's id in the
    `subwords` namespace (0 padding, 1 unknown). `ElmocBiLm` runs the biLM over the pieces of the
    whole sentence and gives each word the states of its pieces (see `ElmocBiLm`).

    # Parameters

    piece_tokenizer : the archive's `SentencePieceBpeTokenizer`.
    piece_ids : `Dict[str, int]`, the archive's `subwords` namespace (piece -> id).
    unknown_id : `int`, the id of an unknown piece.
    lowercase_tokens : `bool`, lowercase words before splitting them.
    max_token_characters : `int`, see `BilmInputIndexer`.
    """

    def __init__(
        self,
        piece_tokenizer,
        piece_ids: Dict[str, int],
        unknown_id: int,
        lowercase_tokens: bool = False,
        max_token_characters: int = MAX_TOKEN_CHARACTERS,
        token_min_padding_length: int = 0,
    ) -> None:
        super().__init__(lowercase_tokens, max_token_characters, token_min_padding_length)
        self._piece_tokenizer = piece_tokenizer
        self._piece_ids = piece_ids
        self._unknown_id = unknown_id

    def _ids_of(self, token: str) -> List[int]:
        # The ids of one word's pieces (a boundary token is one piece, as in pretraining).
        pieces = [piece.text for piece in self._piece_tokenizer.tokenize(self._lowered(token))]
        if not pieces:
            raise ConfigurationError(f"the biLM's BPE model splits {token!r} into no pieces")
        return [self._piece_ids.get(piece, self._unknown_id) for piece in pieces]


def _piece_vocabulary(archive, namespace: str) -> Dict[str, int]:
    """piece -> id of the archive's vocabulary namespace (a padded namespace: ids from 1)."""
    from elmoc_allennlp.common.archives import read_archive_member

    name = f"vocabulary/{namespace}.txt"
    if archive.local_path.is_dir():
        path = archive.local_path / name
        data = path.read_bytes() if path.is_file() else None
    else:
        data = read_archive_member(archive.local_path, name)
    if data is None:
        raise ConfigurationError(
            f"biLM archive {archive.archive_file} has no {name}: the vocabulary of its pieces "
            f"(model.text_field_embedder.token_embedders.{archive.input_key}.vocab_namespace)"
        )
    pieces = data.decode("utf-8").split("\n")
    if pieces and pieces[-1] == "":
        pieces.pop()
    return {piece: index + 1 for index, piece in enumerate(pieces)}


def archive_input_indexer(
    archive, lowercase_tokens: Optional[bool] = None, token_min_padding_length: int = 0
) -> BilmInputIndexer:
    """
    The indexer of a biLM archive's input kind (`ElmocArchive`), indexing as pretraining did:
    `FastTextSubwordIndexer` (the archive's fastText model, boundary tokens and lowercasing),
    `ElmocCharacterIndexer` or `ElmocPieceIndexer`, cut at `pretraining_token_cap`.
    `lowercase_tokens` overrides the archive's lowercasing (`None`: as in pretraining; only
    fastText indexers record it, the others do not lowercase by default).
    """
    from elmoc_allennlp.common.bilm_inputs import CHARACTERS_INPUT, FASTTEXT_INPUT, PIECES_INPUT
    from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer

    max_token_characters = pretraining_token_cap(archive)
    if archive.input_kind == FASTTEXT_INPUT:
        return FastTextSubwordIndexer(
            vectors_path=archive.input_vectors_path,
            boundary_tokens=archive.boundary_tokens,
            lowercase_tokens=(
                archive.lowercase_tokens if lowercase_tokens is None else lowercase_tokens
            ),
            token_min_padding_length=token_min_padding_length,
            max_token_characters=max_token_characters,
        )
    if archive.input_kind == CHARACTERS_INPUT:
        return ElmocCharacterIndexer(bool(lowercase_tokens), token_min_padding_length)
    if archive.input_kind == PIECES_INPUT:
        from allennlp.common import Params
        from allennlp.data import Tokenizer

        reader = archive.config["dataset_reader"]
        tokenizer = Tokenizer.from_params(Params(dict(reader["tokenizer"])))
        embedder = archive.config["model"]["text_field_embedder"]["token_embedders"][archive.input_key]
        piece_ids = _piece_vocabulary(archive, embedder.get("vocab_namespace", "tokens"))
        return ElmocPieceIndexer(
            tokenizer,
            piece_ids,
            piece_ids.get("@@UNKNOWN@@", 1),
            bool(lowercase_tokens),
            max_token_characters,
            token_min_padding_length,
        )
    raise ConfigurationError(f"biLM archive {archive.archive_file}: no indexer for {archive.input_kind} input")


def indexed_batch(
    indexer: BilmInputIndexer, sentences: List[List[str]], device: Optional[torch.device] = None
) -> torch.LongTensor:
    """
    The padded ids `(batch_size, timesteps, width)` of tokenized sentences (the counterpart of
    allennlp's `batch_to_ids`): each token's `indexer.token_ids`, 0 padding.
    """
    rows = [[indexer.token_ids(token) for token in sentence] for sentence in sentences]
    timesteps = max((len(row) for row in rows), default=0)
    width = max((len(ids) for row in rows for ids in row), default=1)
    batch = torch.zeros(0, timesteps, width, dtype=torch.long)
    if rows:
        batch = torch.stack([padded_ids(row, timesteps, width) for row in rows])
    return batch if device is None else batch.to(device)
