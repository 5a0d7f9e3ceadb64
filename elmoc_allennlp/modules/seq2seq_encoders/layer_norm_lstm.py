"""The ELMo-C encoder: ELMo's `ElmoLstm` with LayerNorm inside the recurrence (`"reference"` or `"auto"`: fast)."""

import contextlib
import functools
import logging
from typing import Any, List, Optional, Tuple

import torch

from allennlp.common.checks import ConfigurationError, check_dimensions_match
from allennlp.modules.seq2seq_encoders.seq2seq_encoder import Seq2SeqEncoder
from allennlp.nn.initializers import block_orthogonal
from allennlp.nn.util import get_dropout_mask

from elmoc_allennlp.common.checks import check_one_of, check_positive, check_probability
from elmoc_allennlp.common.precision import bias_of
from elmoc_allennlp.common.torch_versions import autocast_dtype, autocast_enabled
from elmoc_allennlp.modules.seq2seq_encoders.lstm_recurrence import (
    ConcurrentRunner,
    RecurrenceConfig,
    SequencePacking,
    pack_by_length,
    recurrence_inference,
    run_recurrences,
    wide_dtype,
)

logger = logging.getLogger(__name__)

IMPLEMENTATIONS = ("auto", "reference")

_SEQUENTIAL = ConcurrentRunner(enabled=False)
_CONCURRENT = ConcurrentRunner(enabled=True)
_warned_not_prefix = False


def checked_mask(
    inputs: torch.Tensor, mask: Optional[torch.BoolTensor], input_dim: int
) -> torch.BoolTensor:
    """Checks the shapes of `inputs` and `mask`; returns the mask (all `True` for `None`)."""
    if inputs.dim() != 3:
        raise ValueError(
            f"inputs must have shape (batch_size, timesteps, {input_dim}), got {tuple(inputs.size())}"
        )
    check_dimensions_match(inputs.size(-1), input_dim, "inputs' last dimension", "input_dim")
    if mask is None:
        return inputs.new_ones(inputs.size()[:2], dtype=torch.bool)
    if mask.size() != inputs.size()[:2]:
        raise ValueError(
            f"mask must have shape {tuple(inputs.size()[:2])}, got {tuple(mask.size())}"
        )
    return mask.bool()


def _fast_packing(implementation: str, mask: torch.BoolTensor) -> Optional[SequencePacking]:
    """The fast path's packing, or `None` for the reference path (chosen, empty or not prefix)."""
    global _warned_not_prefix
    if implementation == "reference":
        return None
    packing = pack_by_length(mask)
    if packing is None and not _warned_not_prefix:
        logger.warning("The fast LSTM path needs the padding at the end; using the reference path")
        _warned_not_prefix = True
    return packing if packing is not None and packing.num_rows > 0 else None


def _mixed_precision(
    inputs: torch.Tensor,
) -> Tuple[Optional[torch.dtype], contextlib.AbstractContextManager]:
    """
    Under autocast on `inputs`' device: autocast's dtype, which the fast path's matrix products then
    run in (mixed precision, issue #51: cells, states and LayerNorms stay float32), and a context
    without autocast (the fast path casts what it needs itself). Otherwise `None` and a no-op.
    """
    device_type = inputs.device.type
    if autocast_enabled(device_type):
        return autocast_dtype(device_type), torch.autocast(device_type, enabled=False)
    return None, contextlib.nullcontext()


class LayerNormLstmLayer(torch.nn.Module):
    """
    One direction of one layer of the ELMo-C LSTM: allennlp's `LstmCellWithProjection` with
    LayerNorm of the projected, clipped state, which is both the output and the state fed back.

    # Parameters

    input_dim : `int`
        The dimension of the layer's input: `LayerNormLstm`'s `projection_dim` (the projected input,
        or the layer below's output).
    projection_dim : `int`
        The dimension of the projected state: the layer's output and the state fed back.
    cell_dim : `int`
        The dimension of the memory cell, projected down to `projection_dim` at every step.
    go_forward : `bool`, optional (default = `True`)
        Left-to-right if `True`, right-to-left otherwise.
    layer_norm : `bool`, optional (default = `True`)
        As [`LayerNormLstm`](#layernormlstm)'s: LayerNorm of the projected state.
    cell_clip : `float`, optional (default = `3.0`)
        As `LayerNormLstm`'s: the magnitude at which the memory cell is clipped; `None`: no
        clipping.
    projection_clip : `float`, optional (default = `3.0`)
        As `LayerNormLstm`'s: the magnitude at which the projected state is clipped; `None`: no
        clipping.
    recurrent_dropout : `float`, optional (default = `0.0`)
        As `LayerNormLstm`'s: variational dropout on the state fed back, in training only.
    implementation : `str`, optional (default = `"auto"`)
        As `LayerNormLstm`'s: `"auto"` (the fast path) or `"reference"`; also a settable attribute.
    """

    def __init__(
        self,
        input_dim: int,
        projection_dim: int,
        cell_dim: int,
        go_forward: bool = True,
        layer_norm: bool = True,
        cell_clip: Optional[float] = 3.0,
        projection_clip: Optional[float] = 3.0,
        recurrent_dropout: float = 0.0,
        implementation: str = "auto",
    ) -> None:
        super().__init__()
        check_positive(input_dim, "input_dim")
        check_positive(projection_dim, "projection_dim")
        check_positive(cell_dim, "cell_dim")
        check_positive(cell_clip, "cell_clip", allow_none=True)
        check_positive(projection_clip, "projection_clip", allow_none=True)
        check_probability(recurrent_dropout, "recurrent_dropout")
        self.implementation = implementation
        self.input_dim = input_dim
        self.projection_dim = projection_dim
        self.cell_dim = cell_dim
        self.go_forward = go_forward
        self.cell_clip = cell_clip
        self.projection_clip = projection_clip
        self.recurrent_dropout = recurrent_dropout

        self.input_linearity = torch.nn.Linear(input_dim, 4 * cell_dim, bias=False)
        self.state_linearity = torch.nn.Linear(projection_dim, 4 * cell_dim, bias=True)
        self.state_projection = torch.nn.Linear(cell_dim, projection_dim, bias=False)
        self.layer_norm: Optional[torch.nn.LayerNorm] = (
            torch.nn.LayerNorm(projection_dim) if layer_norm else None
        )
        self.reset_parameters()

    @property
    def implementation(self) -> str:
        return self._implementation

    @implementation.setter
    def implementation(self, implementation: str) -> None:
        check_one_of(implementation, IMPLEMENTATIONS, "implementation")
        self._implementation = implementation

    def reset_parameters(self) -> None:
        # As `LstmCellWithProjection`: orthogonal blocks per gate, forget gate bias 1.
        block_orthogonal(self.input_linearity.weight.data, [self.cell_dim, self.input_dim])
        block_orthogonal(self.state_linearity.weight.data, [self.cell_dim, self.projection_dim])
        self.state_linearity.bias.data.fill_(0.0)
        self.state_linearity.bias.data[self.cell_dim : 2 * self.cell_dim].fill_(1.0)
        if self.layer_norm is not None:
            self.layer_norm.reset_parameters()

    def forward(
        self, inputs: torch.Tensor, mask: Optional[torch.BoolTensor] = None
    ) -> torch.Tensor:
        """
        `inputs` `(batch_size, timesteps, input_dim)` and `mask` `(batch_size, timesteps)` (`True` at real
        positions) -> the states `(batch_size, timesteps, projection_dim)`, zero at padding.
        """
        mask = checked_mask(inputs, mask, self.input_dim)
        packing = _fast_packing(self.implementation, mask)
        if packing is None:
            return self._forward_reference(inputs, mask)
        mixed, precision = _mixed_precision(inputs)
        with precision:
            direction = self.recurrence_inputs(packing.pack(inputs), packing, mixed)
            return packing.unpack(run_recurrences(_SEQUENTIAL, [direction])[0])

    def _dropout_mask(
        self, batch_size: int, like: torch.Tensor, dtype: Optional[torch.dtype] = None
    ) -> Optional[torch.Tensor]:
        """The recurrent dropout mask `(batch_size, projection_dim)` in `dtype` (default: `like`'s),
        or `None` without dropout."""
        if not (self.training and self.recurrent_dropout > 0.0):
            return None
        state = like.new_zeros(batch_size, self.projection_dim, dtype=dtype)
        return get_dropout_mask(self.recurrent_dropout, state).to(state.dtype)

    def recurrence_inputs(
        self,
        packed_inputs: torch.Tensor,
        packing: SequencePacking,
        mixed: Optional[torch.dtype] = None,
    ) -> Tuple[RecurrenceConfig, Tuple[Optional[torch.Tensor], ...]]:
        """
        The `(config, tensors)` of `run_recurrences` for `packed_inputs`, with a new dropout mask:
        the inputs and weights in the weights' dtype, or in `mixed` (autocast's dtype, from
        `_mixed_precision`) for the matrix products, the LayerNorm and the mask in float32.
        """
        low = self.input_linearity.weight.dtype if mixed is None else mixed
        wide = wide_dtype(low)
        dropout_mask = self._dropout_mask(packing.batch_size, packed_inputs, wide)
        config = RecurrenceConfig(
            batch_sizes=packing.batch_sizes,
            offsets=packing.offsets,
            go_forward=self.go_forward,
            cell_clip=self.cell_clip,
            projection_clip=self.projection_clip,
            layer_norm_eps=self.layer_norm.eps if self.layer_norm is not None else 0.0,
        )
        norm = self.layer_norm
        return config, (
            packed_inputs.to(low),
            self.input_linearity.weight.to(low),
            self.state_linearity.bias,
            self.state_linearity.weight.to(low),
            self.state_projection.weight.to(low),
            None if norm is None else norm.weight.to(wide),
            None if norm is None else norm.bias.to(wide),
            None if dropout_mask is None else packing.sort_batch(dropout_mask),
        )

    def _forward_reference(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        batch_size, total_timesteps, _ = inputs.size()
        input_gates = torch.nn.functional.linear(
            inputs.transpose(0, 1), self.input_linearity.weight, self.state_linearity.bias
        )
        state_weight = self.state_linearity.weight.t()
        step_masks = mask.t().unsqueeze(-1)  # (timesteps, batch_size, 1)
        # One host sync: full steps need no masked update.
        step_is_full: List[bool] = mask.all(dim=0).tolist()

        memory = inputs.new_zeros(batch_size, self.cell_dim)
        state = inputs.new_zeros(batch_size, self.projection_dim)
        dropout_mask = self._dropout_mask(batch_size, inputs)

        outputs: List[Optional[torch.Tensor]] = [None] * total_timesteps
        steps = range(total_timesteps) if self.go_forward else range(total_timesteps - 1, -1, -1)
        for index in steps:
            gates = torch.addmm(input_gates[index], state, state_weight)
            input_gate, forget_gate, memory_init, output_gate = gates.chunk(4, dim=1)
            new_memory = torch.sigmoid(input_gate) * torch.tanh(memory_init)
            new_memory = new_memory + torch.sigmoid(forget_gate) * memory
            if self.cell_clip is not None:
                new_memory = torch.clamp(new_memory, -self.cell_clip, self.cell_clip)
            new_state = self.state_projection(torch.sigmoid(output_gate) * torch.tanh(new_memory))
            if self.projection_clip is not None:
                new_state = torch.clamp(new_state, -self.projection_clip, self.projection_clip)
            # ELMo-C: normalise inside the recurrence, so the normalised state is fed back.
            if self.layer_norm is not None:
                new_state = self.layer_norm(new_state)
            if dropout_mask is not None:
                new_state = new_state * dropout_mask

            if step_is_full[index]:
                memory, state = new_memory, new_state
                outputs[index] = new_state
            else:
                keep = step_masks[index]
                memory = torch.where(keep, new_memory, memory)
                state = torch.where(keep, new_state, state)
                outputs[index] = new_state * keep
        return torch.stack(outputs, dim=1)  # type: ignore[arg-type]


def returns_all_layers(encoder: Any) -> bool:
    """Whether a `Seq2SeqEncoder` (class or instance) returns all its layers, as a biLM's must."""
    return callable(getattr(encoder, "forward_all_layers", None))


@Seq2SeqEncoder.register("elmoc_lstm")
class LayerNormLstm(Seq2SeqEncoder):
    """
    The ELMo-C bidirectional language model encoder (Li et al. 2019, section 4.1): the input projected
    to `projection_dim` (and LayerNorm-ed), then forward and backward stacks of
    [`LayerNormLstmLayer`](#layernormlstmlayer)s with residual connections from layer 1 on, as allennlp's
    `ElmoLstm`. The output is `[forward; backward]`.

    Registered as a `Seq2SeqEncoder` with name "elmoc_lstm".

    # Parameters

    input_dim : `int`
        The dimension of the input vectors (the fastText dimension in ELMo-C: 300 for the
        paper's `crawl-300d-2M-subword`).
    projection_dim : `int`
        The dimension of the projected input and of every LSTM state (its hidden output): 512 at
        the paper's size, so the output is 1024, as ELMo's.
    cell_dim : `int`
        The dimension of the LSTM memory cells, projected down to `projection_dim` at every step
        (ELMo's LSTMP): 4096 at the paper's size.
    num_layers : `int`, optional (default = `2`)
        The number of LSTM layers in each direction (ELMo's and the paper's 2).
    layer_norm : `bool`, optional (default = `True`)
        Whether to LayerNorm the projected input and the LSTM states, as ELMo-C does (paper section
        4.1); `False` gives ELMo's LSTM.
    cell_clip : `float`, optional (default = `3.0`)
        The magnitude at which memory cells are clipped (ELMo's and the authors' 3); `None` disables
        clipping.
    projection_clip : `float`, optional (default = `3.0`)
        The magnitude at which projected states are clipped (ELMo's 3); `None` disables clipping.
    recurrent_dropout : `float`, optional (default = `0.0`)
        Variational dropout on the recurrent states: one mask per sequence, in training only. The
        pretraining configs use the authors' 0.1.
    implementation : `str`, optional (default = `"auto"`)
        `"auto"` (the fast path: sequences packed by length, docs/gpu_recurrence.md) or
        `"reference"` (step by step over the padded batch; the same results), for every layer. Also
        a settable attribute. A mask whose padding is not at the end takes the reference path, with
        a warning.
    parallel_directions : `bool`, optional (default = `True`)
        On CPU, run the fast path's two directions of a layer in two threads (a speed setting; the
        results are the same).
    input_projection_bias : `bool`, optional (default = `None`)
        Whether the input projection has a bias (as in uclanlp/ELMO-C). `None`: only without
        `layer_norm` (LayerNorm's own bias makes it redundant).
    separate_input_projections : `bool`, optional (default = `False`)
        One input projection (and LayerNorm) per direction, as the authors' two independent LMs.
    """

    def __init__(
        self,
        input_dim: int,
        projection_dim: int,
        cell_dim: int,
        num_layers: int = 2,
        layer_norm: bool = True,
        cell_clip: Optional[float] = 3.0,
        projection_clip: Optional[float] = 3.0,
        recurrent_dropout: float = 0.0,
        implementation: str = "auto",
        parallel_directions: bool = True,
        input_projection_bias: Optional[bool] = None,
        separate_input_projections: bool = False,
    ) -> None:
        super().__init__(stateful=False)
        check_positive(input_dim, "input_dim")
        check_positive(projection_dim, "projection_dim")
        check_positive(cell_dim, "cell_dim")
        check_positive(num_layers, "num_layers")
        self._input_dim = input_dim
        self.projection_dim = projection_dim
        self.cell_dim = cell_dim
        self.num_layers = num_layers
        self.parallel_directions = parallel_directions
        self.separate_input_projections = separate_input_projections

        bias = not layer_norm if input_projection_bias is None else input_projection_bias
        self.input_projection = torch.nn.Linear(input_dim, projection_dim, bias=bias)
        self.input_layer_norm = torch.nn.LayerNorm(projection_dim) if layer_norm else None
        if separate_input_projections:
            self.backward_input_projection = torch.nn.Linear(input_dim, projection_dim, bias=bias)
            self.backward_input_layer_norm = (
                torch.nn.LayerNorm(projection_dim) if layer_norm else None
            )

        def make_layer(go_forward: bool) -> LayerNormLstmLayer:
            return LayerNormLstmLayer(
                projection_dim,
                projection_dim,
                cell_dim,
                go_forward=go_forward,
                layer_norm=layer_norm,
                cell_clip=cell_clip,
                projection_clip=projection_clip,
                recurrent_dropout=recurrent_dropout,
                implementation=implementation,
            )

        self.forward_layers = torch.nn.ModuleList(make_layer(True) for _ in range(num_layers))
        self.backward_layers = torch.nn.ModuleList(make_layer(False) for _ in range(num_layers))

    @property
    def implementation(self) -> str:
        return self.forward_layers[0].implementation

    @implementation.setter
    def implementation(self, implementation: str) -> None:
        for layer in [*self.forward_layers, *self.backward_layers]:
            layer.implementation = implementation  # the first one checks it

    def get_input_dim(self) -> int:
        return self._input_dim

    def get_output_dim(self) -> int:
        return 2 * self.projection_dim

    def is_bidirectional(self) -> bool:
        return True

    def forward(
        self, inputs: torch.Tensor, mask: Optional[torch.BoolTensor] = None
    ) -> torch.Tensor:
        """As `LayerNormLstmLayer.forward`; returns the top layer `(batch_size, timesteps, 2 * projection_dim)`."""
        return self._encode(inputs, mask, all_layers=False)[-1]

    def forward_all_layers(
        self, inputs: torch.Tensor, mask: Optional[torch.BoolTensor] = None
    ) -> torch.Tensor:
        """As `forward`, but every layer `(num_layers + 1, batch_size, timesteps, 2 * projection_dim)`."""
        return torch.stack(self._encode(inputs, mask, all_layers=True))

    def _project(
        self, inputs: torch.Tensor, mixed: Optional[torch.dtype] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        The (normalised) input projections of the forward and the backward stack; with `mixed`
        (autocast's dtype, autocast itself off), the product in `mixed`, the result and its
        LayerNorm in float32.
        """
        projections = [(self.input_projection, self.input_layer_norm)]
        if self.separate_input_projections:
            projections.append((self.backward_input_projection, self.backward_input_layer_norm))
        if mixed is None:
            projected = [projection(inputs) for projection, _ in projections]
        else:
            projected = [
                torch.nn.functional.linear(
                    inputs.to(mixed),
                    projection.weight.to(mixed),
                    None if projection.bias is None else projection.bias.to(mixed),
                ).to(wide_dtype(mixed))
                for projection, _ in projections
            ]
        projected = [
            output if norm is None else norm(output)
            for output, (_, norm) in zip(projected, projections)
        ]
        return projected[0], projected[-1]

    # Set by `elmoc_allennlp.common.precision.prepare_encoder` on a frozen biLM's encoder (bfloat16
    # or int8): the dtype its linear maps take as input. Set, `_encode` takes `_encode_inference`.
    inference_input_dtype: Optional[torch.dtype] = None

    def _encode(
        self, inputs: torch.Tensor, mask: Optional[torch.BoolTensor], all_layers: bool
    ) -> List[torch.Tensor]:
        mask = checked_mask(inputs, mask, self._input_dim)
        if self.inference_input_dtype is not None:
            return self._encode_inference(inputs, mask, all_layers)
        packing = _fast_packing(self.implementation, mask)
        mixed: Optional[torch.dtype] = None
        precision: contextlib.AbstractContextManager = contextlib.nullcontext()
        if packing is not None:
            mixed, precision = _mixed_precision(inputs)
            inputs = packing.pack(inputs)
            if mixed is None:  # inputs of another dtype take the weights'
                inputs = inputs.to(self.input_projection.weight.dtype)
        with precision:
            forward_output, backward_output = self._project(inputs, mixed)
            if packing is None:  # zero at padding, as unpacked rows are
                keep = mask.unsqueeze(-1)
                forward_output, backward_output = forward_output * keep, backward_output * keep

            def padded(forward: torch.Tensor, backward: torch.Tensor) -> torch.Tensor:
                both = torch.cat([forward, backward], dim=-1)
                return both if packing is None else packing.unpack(both)

            layers = [padded(forward_output, backward_output)] if all_layers else []
            runner = (
                _CONCURRENT
                if self.parallel_directions and inputs.device.type == "cpu"
                else _SEQUENTIAL
            )
            for layer_index, (forward_layer, backward_layer) in enumerate(
                zip(self.forward_layers, self.backward_layers)
            ):
                forward_input, backward_input = forward_output, backward_output
                if packing is None:
                    forward_output = forward_layer._forward_reference(forward_input, mask)
                    backward_output = backward_layer._forward_reference(backward_input, mask)
                else:
                    # Dropout masks are drawn in the reference path's order: forward, backward.
                    directions = [
                        forward_layer.recurrence_inputs(forward_input, packing, mixed),
                        backward_layer.recurrence_inputs(backward_input, packing, mixed),
                    ]
                    forward_output, backward_output = run_recurrences(runner, directions)
                if layer_index != 0:
                    # Residual connection; the inputs are zero at padding, so are the outputs.
                    forward_output = forward_output + forward_input
                    backward_output = backward_output + backward_input
                if all_layers or layer_index == self.num_layers - 1:
                    layers.append(padded(forward_output, backward_output))
        return layers

    def _map(self, module: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """A linear map called as its module (quantized, or bfloat16), its output float32."""
        return module(inputs.to(self.inference_input_dtype)).float()

    def _encode_inference(
        self, inputs: torch.Tensor, mask: torch.BoolTensor, all_layers: bool
    ) -> List[torch.Tensor]:
        """
        `_encode` of a prepared encoder (`inference_input_dtype` set), forward only: the sequences
        packed as on the fast path, every linear map called as its module (`_map`), the rest float32.
        """
        packing = pack_by_length(mask)
        if packing is None:
            raise ConfigurationError(
                "the bfloat16 and int8 biLMs need the padding at the end of each sequence"
            )
        batch_size, timesteps = mask.size()
        if packing.num_rows == 0:
            empty = inputs.new_zeros(
                batch_size, timesteps, self.get_output_dim(), dtype=torch.float
            )
            return [empty] * (self.num_layers + 1 if all_layers else 1)
        packed = packing.pack(inputs)
        projections = [(self.input_projection, self.input_layer_norm)]
        if self.separate_input_projections:
            projections.append((self.backward_input_projection, self.backward_input_layer_norm))
        projected = []
        for projection, norm in projections:
            output = self._map(projection, packed)
            projected.append(output if norm is None else norm(output))
        forward_output, backward_output = projected[0], projected[-1]
        layers = []
        if all_layers:
            layers.append(packing.unpack(torch.cat([forward_output, backward_output], dim=-1)))
        runner = (
            _CONCURRENT if self.parallel_directions and inputs.device.type == "cpu" else _SEQUENTIAL
        )
        for layer_index, (forward_layer, backward_layer) in enumerate(
            zip(self.forward_layers, self.backward_layers)
        ):
            forward_input, backward_input = forward_output, backward_output
            forward_output, backward_output = runner.run(
                [
                    functools.partial(self._layer_inference, layer, layer_input, packing)
                    for layer, layer_input in (
                        (forward_layer, forward_input),
                        (backward_layer, backward_input),
                    )
                ]
            )
            if layer_index != 0:
                forward_output = forward_output + forward_input
                backward_output = backward_output + backward_input
            if all_layers or layer_index == self.num_layers - 1:
                layers.append(packing.unpack(torch.cat([forward_output, backward_output], dim=-1)))
        return layers

    def _layer_inference(
        self, layer: LayerNormLstmLayer, packed_inputs: torch.Tensor, packing: SequencePacking
    ) -> torch.Tensor:
        """One layer direction's states of packed inputs on the inference path."""
        config = RecurrenceConfig(
            batch_sizes=packing.batch_sizes,
            offsets=packing.offsets,
            go_forward=layer.go_forward,
            cell_clip=layer.cell_clip,
            projection_clip=layer.projection_clip,
            layer_norm_eps=layer.layer_norm.eps if layer.layer_norm is not None else 0.0,
        )
        norm = layer.layer_norm
        # A quantized map unpacks its bias at every call: taken once per map (and device).
        state_map, state_bias = layer.__dict__.get("_inference_state_bias", (None, None))
        if state_map is not layer.state_linearity or (
            state_bias is not None and state_bias.device != packed_inputs.device
        ):
            state_bias = bias_of(layer.state_linearity)
            layer.__dict__["_inference_state_bias"] = (layer.state_linearity, state_bias)
        return recurrence_inference(
            config,
            self._map(layer.input_linearity, packed_inputs),
            functools.partial(self._map, layer.state_linearity),
            state_bias,
            functools.partial(self._map, layer.state_projection),
            layer.projection_dim,
            None if norm is None else norm.weight,
            None if norm is None else norm.bias,
        )
