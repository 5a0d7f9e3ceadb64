"""
A faster but *different* encoder than ELMo-C's: `torch.nn.LSTM(proj_size=...)` layers with
LayerNorm between layers instead of inside the recurrence.
"""
from typing import List, Optional

import torch

from allennlp.modules.seq2seq_encoders.seq2seq_encoder import Seq2SeqEncoder

from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import BidirectionalStacks, checked_mask


def reverse_within_lengths(padded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """
    Reverses each sequence of a `(batch_size, timesteps, dim)` tensor within its length, leaving
    the padding (at the end) in place. It is its own inverse.
    """
    timesteps = padded.size(1)
    positions = torch.arange(timesteps, device=padded.device).unsqueeze(0)
    lengths = lengths.to(padded.device).unsqueeze(1)
    index = torch.where(positions < lengths, lengths - 1 - positions, positions)
    return padded.gather(1, index.unsqueeze(-1).expand_as(padded))


@Seq2SeqEncoder.register("elmoc_interlayer_norm_lstm")
class InterLayerNormLstm(BidirectionalStacks):
    """
    A bidirectional LSTM encoder with the layout of [`LayerNormLstm`](layer_norm_lstm.md#elmoclstm)
    (input projection, separate stacks, residual connections from layer 1), where each layer
    direction is PyTorch's fused `torch.nn.LSTM(projection_dim, cell_dim, proj_size=...)`.

    **A different model from `elmoc_lstm`**, not a faster implementation: LayerNorm is applied
    between layers, not inside the recurrence, and there is no clipping and no recurrent dropout;
    checkpoints are not interchangeable. Padding must be at the end of each sequence.

    Registered as a `Seq2SeqEncoder` with name "elmoc_interlayer_norm_lstm".

    # Parameters

    input_dim : `int`, required.
        The dimension of the input vectors.
    projection_dim : `int`, required.
        The dimension of the projected input and of every LSTM state; the output dimension is
        `2 * projection_dim`.
    cell_dim : `int`, required.
        The dimension of the LSTM memory cells.
    num_layers : `int`, optional (default = `2`)
        The number of layers in each direction.
    layer_norm : `bool`, optional (default = `True`)
        Whether to LayerNorm the projected input and each layer's LSTM output (before the
        residual connection).
    """

    def __init__(
        self,
        input_dim: int,
        projection_dim: int,
        cell_dim: int,
        num_layers: int = 2,
        layer_norm: bool = True,
    ) -> None:
        super().__init__(input_dim, projection_dim, cell_dim, num_layers)

        # A bias before a LayerNorm would be cancelled by its mean subtraction.
        self.input_projection = torch.nn.Linear(input_dim, projection_dim, bias=not layer_norm)
        self.input_layer_norm: Optional[torch.nn.LayerNorm] = (
            torch.nn.LayerNorm(projection_dim) if layer_norm else None
        )

        def make_lstm() -> torch.nn.LSTM:
            return torch.nn.LSTM(projection_dim, cell_dim, proj_size=projection_dim, batch_first=True)

        def make_norms() -> Optional[torch.nn.ModuleList]:
            if not layer_norm:
                return None
            return torch.nn.ModuleList(torch.nn.LayerNorm(projection_dim) for _ in range(num_layers))

        self.forward_layers = torch.nn.ModuleList(make_lstm() for _ in range(num_layers))
        self.backward_layers = torch.nn.ModuleList(make_lstm() for _ in range(num_layers))
        self.forward_layer_norms = make_norms()
        self.backward_layer_norms = make_norms()

    def _run(
        self,
        lstm: torch.nn.LSTM,
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        padded: bool,
    ) -> torch.Tensor:
        if not padded:
            return lstm(inputs)[0]
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            inputs, lengths.cpu().clamp(min=1), batch_first=True, enforce_sorted=False
        )
        outputs, _ = lstm(packed)
        return torch.nn.utils.rnn.pad_packed_sequence(
            outputs, batch_first=True, total_length=inputs.size(1)
        )[0]

    def _encode(
        self, inputs: torch.Tensor, mask: Optional[torch.BoolTensor], all_layers: bool
    ) -> List[torch.Tensor]:
        mask = checked_mask(inputs, mask, self._input_dim)
        lengths = mask.sum(dim=1)
        positions = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)
        if not torch.equal(mask, positions < lengths.unsqueeze(1)):
            raise ValueError("mask must have the padding at the end of each sequence.")
        padded = not bool(mask.all())
        keep = mask.unsqueeze(-1).to(inputs.dtype)

        projected = self.input_projection(inputs)
        if self.input_layer_norm is not None:
            projected = self.input_layer_norm(projected)
        projected = projected * keep

        layers: List[torch.Tensor] = []
        if all_layers:
            layers.append(torch.cat([projected, projected], dim=-1))

        # The backward stack runs left to right on reversed sequences.
        forward_output = projected
        backward_output = reverse_within_lengths(projected, lengths)
        for index in range(self.num_layers):
            forward_input, backward_input = forward_output, backward_output
            forward_output = self._run(self.forward_layers[index], forward_input, lengths, padded)
            backward_output = self._run(
                self.backward_layers[index], backward_input, lengths, padded
            )
            if self.forward_layer_norms is not None:
                forward_output = self.forward_layer_norms[index](forward_output)
                backward_output = self.backward_layer_norms[index](backward_output)
            forward_output = forward_output * keep
            backward_output = backward_output * keep
            if index != 0:
                forward_output = forward_output + forward_input
                backward_output = backward_output + backward_input
            if all_layers or index == self.num_layers - 1:
                backward = reverse_within_lengths(backward_output, lengths)
                layers.append(torch.cat([forward_output, backward], -1))
        return layers
