"""
How `ElmocBiLm` feeds each input kind of biLM (see `elmoc_allennlp.common.bilm_inputs`) from the
`elmo_tokens` of the `elmoc_subwords` indexer, shape `(batch_size, timesteps, width)`, 0 padding:

* `fasttext`: each token's fastText subword ids; the biLM's `elmoc_fasttext` embedder reads
  `{"subword_ids", "mask"}`.
* `characters`: each token's 50 ELMo character ids; the `character_encoding` embedder reads
  `{"elmo_tokens"}`.
* `pieces`: each word's BPE piece ids (left-aligned). The pieces of the whole sentence are laid out
  in order (`<S>`, the pieces, `</S>`, as in pretraining), the biLM runs over them, and each word
  gets, in every layer, the forward half of the state at its *last* piece and the backward half of
  the state at its *first* piece: the states of each direction after reading the whole word. The
  embedding embedder reads `{"tokens"}`.
"""
from typing import Dict, List, Tuple

import torch

from allennlp.data.tokenizers import Token

from elmoc_allennlp.common.bilm_inputs import CHARACTERS_INPUT, FASTTEXT_INPUT, PIECES_INPUT


def boundary_token_ids(kind: str, pretraining_indexer, vocabulary, token: str) -> List[int]:
    """The ids a boundary token (`<S>`, `</S>`) had in pretraining, from the biLM's own indexer."""
    if kind == FASTTEXT_INPUT:
        return pretraining_indexer.token_ids(token)
    indexed = pretraining_indexer.tokens_to_indices([Token(token)], vocabulary)
    ids = next(iter(indexed.values()))[0]
    return [ids] if isinstance(ids, int) else list(ids)


def bilm_token_tensors(
    kind: str, token_ids: torch.LongTensor, mask: torch.BoolTensor
) -> Dict[str, torch.Tensor]:
    """The tensors the biLM's input embedder reads, from ids with sentence boundaries."""
    if kind == FASTTEXT_INPUT:
        return {"subword_ids": token_ids, "mask": mask}
    if kind == CHARACTERS_INPUT:
        return {"elmo_tokens": token_ids}
    if kind == PIECES_INPUT:
        return {"tokens": token_ids}
    raise ValueError(f"unknown biLM input kind {kind!r}")


def lay_out_pieces(
    piece_ids: torch.LongTensor, start_id: int, end_id: int
) -> Tuple[torch.LongTensor, torch.LongTensor, torch.LongTensor, torch.BoolTensor]:
    """
    `(sequence, first, last, word_mask)`: the piece sequence of each sentence with boundaries,
    shape `(batch_size, 2 + max pieces)`; the positions in it of each word's first and last piece,
    `(batch_size, timesteps)`; and the words' mask.
    """
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
    layers: torch.Tensor, first: torch.LongTensor, last: torch.LongTensor, word_mask: torch.BoolTensor
) -> Tuple[torch.Tensor, torch.BoolTensor]:
    """
    Word states from piece states `layers`, `(num_layers, batch_size, pieces + 2, dim)`:
    `(num_layers, batch_size, timesteps + 2, dim)` with `<S>` first and `</S>` right after each
    sentence's last word (forward half from the last piece, backward half from the first), and the
    mask with boundaries.
    """
    num_layers, batch_size, _, dim = layers.shape
    timesteps = word_mask.size(1)
    counts = word_mask.sum(-1)
    rows = torch.arange(batch_size, device=layers.device)
    forward_index = last.new_zeros(batch_size, timesteps + 2)
    backward_index = last.new_zeros(batch_size, timesteps + 2)
    forward_index[:, 1 : timesteps + 1] = last
    backward_index[:, 1 : timesteps + 1] = first
    end_positions = last.max(-1).values + 1 if timesteps else last.new_ones(batch_size)
    forward_index[rows, counts + 1] = end_positions
    backward_index[rows, counts + 1] = end_positions
    half = dim // 2

    def gather(index: torch.LongTensor) -> torch.Tensor:
        expanded = index.view(1, batch_size, -1, 1).expand(num_layers, -1, -1, dim)
        return layers.gather(2, expanded)

    words = torch.cat([gather(forward_index)[..., :half], gather(backward_index)[..., half:]], -1)
    mask = word_mask.new_zeros(batch_size, timesteps + 2)
    mask[:, 0] = True
    mask[:, 1 : timesteps + 1] = word_mask
    mask[rows, counts + 1] = True
    return words * mask.view(1, batch_size, -1, 1), mask
