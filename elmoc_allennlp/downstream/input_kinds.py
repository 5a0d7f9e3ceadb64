"""The input kinds of pretrained biLMs: `fasttext` (ELMo-C), `characters` (ELMo) and `pieces` (ELMo-Sub)."""

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type

import torch

from allennlp.common import Params, Registrable
from allennlp.common.checks import ConfigurationError
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper
from allennlp.data.tokenizers import Token, Tokenizer
from allennlp.nn.util import add_sentence_boundary_token_ids

from elmoc_allennlp.data.token_indexers.bilm_input_indexers import (
    ELMO_TOKENS_KEY,
    MAX_TOKEN_CHARACTERS,
    BilmInputIndexer,
)
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer

# The key of the fastText file in the fastText embedder's and indexer's configs.
VECTORS_PATH_KEY = "vectors_path"
FASTTEXT_INPUT = "fasttext"
CHARACTERS_INPUT = "characters"
PIECES_INPUT = "pieces"


class ElmocFastTextIndexer(FastTextSubwordIndexer):
    """The fastText subword ids of a fastText-input biLM under ELMo's `elmo_tokens` key, without a mask."""

    ids_key = ELMO_TOKENS_KEY
    length_keys = BilmInputIndexer.length_keys
    tokens_to_indices = BilmInputIndexer.tokens_to_indices
    get_empty_token_list = BilmInputIndexer.get_empty_token_list
    as_padded_tensor_dict = BilmInputIndexer.as_padded_tensor_dict


class ElmocCharacterIndexer(BilmInputIndexer):
    """ELMo's `elmo_characters` ids, for ELMo. Parameters as `BilmInputIndexer`'s."""

    def __init__(self, lowercase_tokens: bool = False, token_min_padding_length: int = 0) -> None:
        super().__init__(lowercase_tokens, token_min_padding_length=token_min_padding_length)
        self._mapper = ELMoCharacterMapper()

    def _ids_of(self, text: str) -> List[int]:
        return self._mapper.convert_word_to_char_ids(self._lowered(text))


class ElmocPieceIndexer(BilmInputIndexer):
    """The ids of each token's BPE pieces (ELMo-Sub), by the archive's tokenizer and vocabulary namespace."""

    def __init__(
        self,
        piece_tokenizer: Tokenizer,
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
        pieces = [piece.text for piece in self._piece_tokenizer.tokenize(self._lowered(token))]
        if not pieces:
            raise ConfigurationError(f"the biLM's BPE model splits {token!r} into no pieces")
        return [self._piece_ids.get(piece, self._unknown_id) for piece in pieces]


class BilmInputKind:
    """An input kind: a biLM archive's, when its token embedder, indexer and tokenizer are of its `types`."""

    name = ""
    # (embedder type, indexer type, tokenizer type or None)
    types: Tuple[str, str, Optional[str]] = ("", "", None)
    ids_key = ""  # of the ids in the tensors the biLM's input embedder reads

    def indexer(
        self, archive, lowercase_tokens: Optional[bool], token_min_padding_length: int
    ) -> BilmInputIndexer:
        """The downstream indexer (`elmo_tokens`); `lowercase_tokens=None`: as in pretraining."""
        raise NotImplementedError

    def given_vectors(
        self, archive, recorded: Dict[str, Any], vectors_path: Optional[str]
    ) -> Dict[str, str]:
        """The config keys (of `recorded`, key -> path) the option `vectors_path` replaces, each with it."""
        if vectors_path is not None:
            raise ConfigurationError(
                f"ELMo-C archive {archive.archive_file} has {self.name} input (model.text_field_embedder."
                f"token_embedders.{archive.input_key}): vectors_path does not apply"
            )
        return {}

    def load_overrides(self, archive, allow_different_vectors: bool) -> Dict[str, Any]:
        """Config overrides for loading the biLM, besides the fastText files found on this machine."""
        return {}

    def input_vectors(self, archive) -> Optional[str]:
        """The fastText model the biLM's input is read with, found on this machine (`None`: not fastText input)."""
        return None

    def lowercased_input(self, archive) -> bool:
        """Whether pretraining lowercased tokens when its config does not say (its indexer's default)."""
        return False

    def boundary_ids(self, pretraining_indexer, vocabulary, token: str) -> List[int]:
        """The ids a boundary token (`<S>`, `</S>`) had in pretraining, from the biLM's own indexer."""
        indexed = pretraining_indexer.tokens_to_indices([Token(token)], vocabulary)
        ids = next(iter(indexed.values()))[0]
        return [ids] if isinstance(ids, int) else list(ids)

    def tensors(self, ids: torch.LongTensor, mask: torch.BoolTensor) -> Dict[str, torch.Tensor]:
        """The tensors the biLM's input embedder reads, from ids with sentence boundaries."""
        return {self.ids_key: ids}

    def contextual_layers(
        self, bilm, input_key: str, inputs: torch.LongTensor, boundary_ids: torch.LongTensor
    ) -> Tuple[torch.Tensor, torch.BoolTensor]:
        """`(layers, mask)` of words with boundaries, `(num_layers, batch, timesteps + 2, dim)`."""
        ids, mask = add_boundaries(inputs, boundary_ids)
        layers, _ = bilm.contextual_layers({input_key: self.tensors(ids, mask)})
        return layers, mask


def add_boundaries(
    inputs: torch.LongTensor, boundary_ids: torch.LongTensor
) -> Tuple[torch.LongTensor, torch.BoolTensor]:
    """
    Ids `(batch, timesteps + 2, width)` with `boundary_ids` (`<S>`, `</S>`) around every sentence,
    and their mask.
    """
    width = max(inputs.size(-1), boundary_ids.size(1))
    padded = torch.nn.functional.pad(inputs, (0, width - inputs.size(-1)))
    begin, end = torch.nn.functional.pad(boundary_ids, (0, width - boundary_ids.size(1)))
    return add_sentence_boundary_token_ids(padded, (inputs > 0).any(-1), begin, end)


def pretraining_token_cap(archive) -> int:
    """Where a biLM archive's pretraining cut tokens: its indexer's or its reader's limit."""
    indexer = archive.config["dataset_reader"]["token_indexers"][archive.input_key]
    limits = (
        archive.max_token_characters,
        indexer.get("max_token_characters", MAX_TOKEN_CHARACTERS),
    )
    return min(limit for limit in limits if limit is not None)


class FastTextInput(BilmInputKind):
    name = FASTTEXT_INPUT
    types = ("elmoc_fasttext", "elmoc_fasttext_subwords", None)
    ids_key = "subword_ids"
    # Where the input's indexer and embedder are configured, each with the fastText model.
    _configs = ("dataset_reader.token_indexers", "model.text_field_embedder.token_embedders")

    def indexer(self, archive, lowercase_tokens, token_min_padding_length):
        return ElmocFastTextIndexer(
            vectors_path=archive.input_vectors_path,
            boundary_tokens=archive.boundary_tokens,
            lowercase_tokens=(
                archive.lowercase_tokens if lowercase_tokens is None else lowercase_tokens
            ),
            token_min_padding_length=token_min_padding_length,
            max_token_characters=pretraining_token_cap(archive),
        )

    def given_vectors(self, archive, recorded, vectors_path):
        """`vectors_path` replaces the input's fastText model, wherever the config names that file."""
        keys = {f"{config}.{archive.input_key}.{VECTORS_PATH_KEY}" for config in self._configs}
        missing = sorted(keys - set(recorded))
        if missing:
            raise ConfigurationError(f"ELMo-C archive {archive.archive_file} has no {missing}")
        if vectors_path is None:
            return {}
        path = Path(vectors_path).expanduser()
        if not path.is_file():
            raise ConfigurationError(f"fastText model {vectors_path} (vectors_path) does not exist")
        input_recorded = recorded[f"{self._configs[1]}.{archive.input_key}.{VECTORS_PATH_KEY}"]
        return {
            key: str(path)
            for key, value in recorded.items()
            if key in keys or value == input_recorded
        }

    def load_overrides(self, archive, allow_different_vectors):
        """The embedder takes other vectors than the biLM's own with `allow_different_vectors`."""
        if not allow_different_vectors:
            return {}
        return {f"{self._configs[1]}.{archive.input_key}.allow_different_vectors": True}

    def lowercased_input(self, archive):
        """The `elmoc_fasttext_subwords` default: as its fastText model (lowercased text: lowercase)."""
        path = archive.vectors_overrides[
            f"{self._configs[0]}.{archive.input_key}.{VECTORS_PATH_KEY}"
        ]
        return bool(FastTextVectors.from_path(path).case.lowercased)

    def input_vectors(self, archive):
        """The embedder's fastText model; its dimension must be the contextualizer's `input_dim`."""
        path = archive.vectors_overrides[
            f"{self._configs[1]}.{archive.input_key}.{VECTORS_PATH_KEY}"
        ]
        expected = archive.config["model"]["contextualizer"].get("input_dim")
        dim = FastTextVectors.from_path(path).dim
        if expected is not None and dim != expected:
            raise ConfigurationError(
                f"ELMo-C archive {archive.archive_file} gets fastText vectors of dimension {dim} "
                f"({path}), not model.contextualizer.input_dim = {expected}: wrong vectors_path?"
            )
        return path

    def boundary_ids(self, pretraining_indexer, vocabulary, token):
        return pretraining_indexer.token_ids(token)

    def tensors(self, ids, mask):
        return {self.ids_key: ids, "mask": mask}


class CharactersInput(BilmInputKind):
    name = CHARACTERS_INPUT
    types = ("character_encoding", "elmo_characters", None)
    ids_key = ELMO_TOKENS_KEY

    def indexer(self, archive, lowercase_tokens, token_min_padding_length):
        return ElmocCharacterIndexer(bool(lowercase_tokens), token_min_padding_length)


class PiecesInput(BilmInputKind):
    name = PIECES_INPUT
    types = ("embedding", "single_id", "elmoc_sentencepiece_bpe")
    ids_key = "tokens"

    def indexer(self, archive, lowercase_tokens, token_min_padding_length):
        tokenizer = Tokenizer.from_params(
            Params(dict(archive.config["dataset_reader"]["tokenizer"]))
        )
        embedder = archive.config["model"]["text_field_embedder"]["token_embedders"][
            archive.input_key
        ]
        piece_ids = archive.vocabulary_namespace(embedder.get("vocab_namespace", "tokens"))
        return ElmocPieceIndexer(
            tokenizer,
            piece_ids,
            piece_ids.get("@@UNKNOWN@@", 1),
            bool(lowercase_tokens),
            pretraining_token_cap(archive),
            token_min_padding_length,
        )

    def contextual_layers(self, bilm, input_key, inputs, boundary_ids):
        """A word's forward states are its last piece's, its backward states its first piece's."""
        start_id, end_id = (int(ids[0]) for ids in boundary_ids)
        sequence, first, last, word_mask = lay_out_pieces(inputs, start_id, end_id)
        layers, _ = bilm.contextual_layers({input_key: self.tensors(sequence, sequence > 0)})
        return pieces_to_words(layers, first, last, word_mask)


KINDS: Tuple[BilmInputKind, ...] = (FastTextInput(), CharactersInput(), PiecesInput())


def lay_out_pieces(
    piece_ids: torch.LongTensor, start_id: int, end_id: int
) -> Tuple[torch.LongTensor, torch.LongTensor, torch.LongTensor, torch.BoolTensor]:
    """Pieces with boundaries per sentence, each word's first and last piece position, the word mask."""
    word_mask = (piece_ids > 0).any(-1)
    lengths = (piece_ids > 0).sum(-1)
    ends = lengths.cumsum(-1)  # 1-based position of each word's last piece (<S> is at 0)
    first = ends - lengths + 1
    totals = lengths.sum(-1)
    batch_size, _, width = piece_ids.shape
    sequence = piece_ids.new_zeros(batch_size, int(totals.max().item() if batch_size else 0) + 2)
    sequence[:, 0] = start_id
    offsets = torch.arange(width, device=piece_ids.device)
    filled = offsets < lengths.unsqueeze(-1)
    positions = first.unsqueeze(-1) + offsets
    rows = torch.arange(batch_size, device=piece_ids.device).view(-1, 1, 1).expand_as(positions)
    sequence[rows[filled], positions[filled]] = piece_ids[filled]
    sequence[torch.arange(batch_size, device=piece_ids.device), totals + 1] = end_id
    return sequence, first * word_mask, ends * word_mask, word_mask


def pieces_to_words(
    layers: torch.Tensor,
    first: torch.LongTensor,
    last: torch.LongTensor,
    word_mask: torch.BoolTensor,
) -> Tuple[torch.Tensor, torch.BoolTensor]:
    """Word states and mask, with boundaries: forward halves from last pieces, backward from first ones."""
    num_layers, batch_size, _, dim = layers.shape
    timesteps = word_mask.size(1)
    counts = word_mask.sum(-1)
    rows = torch.arange(batch_size, device=layers.device)
    # Forward, backward: the piece position of <S> (0), of each word and of </S> (after the last piece).
    index = torch.nn.functional.pad(torch.stack([last, first]), (1, 1))
    index[:, rows, counts + 1] = last.max(-1).values + 1 if timesteps else last.new_ones(batch_size)
    forward, backward = (
        layers.gather(2, i.view(1, batch_size, -1, 1).expand(num_layers, -1, -1, dim))
        for i in index
    )
    words = torch.cat([forward[..., : dim // 2], backward[..., dim // 2 :]], -1)
    mask = word_mask.new_zeros(batch_size, timesteps + 2)
    mask[:, 0] = True
    mask[:, 1 : timesteps + 1] = word_mask
    mask[rows, counts + 1] = True
    return words * mask.view(1, batch_size, -1, 1), mask


def registered_class(base: Type[Registrable], name: Any) -> Any:
    """What the config type `name` (a registered or dotted name) resolves to under `base`, or `None`."""
    if not isinstance(name, str):
        return None
    try:
        return base.resolve_class_name(name)[0]
    except ConfigurationError:
        return None


def registered_as(base: Type[Registrable], name: Any, registered_name: str) -> bool:
    """Whether the config type `name` means `registered_name`."""
    return registered_class(base, name) is base.resolve_class_name(registered_name)[0]


def _type_of(spec: Any) -> Any:
    return spec.get("type") if isinstance(spec, dict) else spec


def find_input_kind(config: Dict[str, Any]) -> Tuple[str, BilmInputKind]:
    """`(text field key, input kind)` of a biLM config's one token embedder (not `empty`)."""
    from allennlp.data import TokenIndexer
    from allennlp.modules.token_embedders import TokenEmbedder

    embedders = config["model"].get("text_field_embedder", {}).get("token_embedders", {})
    used = {key: _type_of(spec) for key, spec in embedders.items() if _type_of(spec) != "empty"}
    supported = ", ".join(f"'{kind.types[0]}' ({kind.name})" for kind in KINDS)
    if len(used) != 1:
        raise ConfigurationError(
            f"model.text_field_embedder.token_embedders are {used}; downstream use "
            f"needs exactly one, of {supported}"
        )
    key, embedder_type = next(iter(used.items()))
    kinds = [kind for kind in KINDS if registered_as(TokenEmbedder, embedder_type, kind.types[0])]
    if not kinds:
        raise ConfigurationError(
            f"model.text_field_embedder.token_embedders.{key} is {embedder_type!r}, not one of {supported}"
        )
    _, indexer, tokenizer = kinds[0].types
    reader = config.get("dataset_reader", {})
    indexer_type = _type_of(reader.get("token_indexers", {}).get(key))
    if not registered_as(TokenIndexer, indexer_type, indexer):
        raise ConfigurationError(
            f"dataset_reader.token_indexers.{key} is {indexer_type!r}, not '{indexer}'"
        )
    tokenizer_type = _type_of(reader.get("tokenizer"))
    if tokenizer is not None and not registered_as(Tokenizer, tokenizer_type, tokenizer):
        raise ConfigurationError(
            f"dataset_reader.tokenizer is {tokenizer_type!r}, not '{tokenizer}'"
        )
    return key, kinds[0]
