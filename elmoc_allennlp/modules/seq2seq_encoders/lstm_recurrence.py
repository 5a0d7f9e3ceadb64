"""
The fast path of the ELMo-C LSTM (`elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm`): the recurrence of a
layer (one direction, or both) as a single autograd node with a hand-written backward pass, over
sequences packed by length.

What it computes is exactly what `LayerNormLstmLayer`'s reference path computes (the per-step
equations are in its docstring); how:

* **Packing by length** ([`SequencePacking`](#sequencepacking)). The batch is sorted by length,
  so at position t the sequences still running are a prefix of the sorted batch, and the rows of
  all positions are stored back to back (the layout of `torch.nn.utils.rnn.PackedSequence`).
  Padding costs nothing (no masked updates, no wasted products), a right-to-left sequence starts
  from a zero state at its last token for free, and every per-step operand is a contiguous slice.
  Layers take and return packed rows, so a stack of layers packs once and unpacks once.
* **Big matrix products outside the loop.** The input-to-gates product of all positions is one
  GEMM before the recurrence, and its weight and input gradients are one GEMM each. In the
  backward pass the gradients of the recurrent and projection weights are
  accumulated as one GEMM each over all rows at the end, instead of autograd's one rank-`batch`
  update per step (which reads and writes the whole weight gradient every step).
* **Only what the recurrence needs per step**: two GEMMs forward (state to gates, cell to
  projection) and two backward, written into preallocated buffers, plus the elementwise work of
  the cell and of the LayerNorm, with PyTorch operations writing in place. The backward pass
  stores gate activations, cells, projected states and LayerNorm statistics, and recomputes only
  `tanh(cell)`.
* **Both directions at once** ([`ConcurrentRunner`](#concurrentrunner)). The forward and backward
  directions of a layer are independent; on CPU their forward passes, and later their backward
  passes, run in two threads with half of the intra-op threads each.

Everything is PyTorch operations: nothing is compiled at run time, and it runs on any device.
"""
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

import torch

T = TypeVar("T")


class SequencePacking(NamedTuple):
    """
    Where each real position of a `(batch_size, timesteps)` batch goes in the packed layout:
    packed row `offsets[t] + j` holds position t of the j-th longest sequence, for
    `j < batch_sizes[t]`.

    Build it with [`pack_by_length`](#pack_by_length).
    """

    batch_size: int
    timesteps: int
    batch_sizes: List[int]  # running sequences per position, non-increasing, all > 0
    offsets: List[int]
    order: torch.Tensor  # (batch_size,) batch index of the j-th longest sequence
    index: torch.Tensor  # (num_rows,) flat index (b * timesteps + t) of each packed row

    @property
    def num_rows(self) -> int:
        return self.index.numel()

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """`(batch_size, timesteps, dim)` -> `(num_rows, dim)`."""
        return padded.reshape(-1, padded.size(-1)).index_select(0, self.index)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """`(num_rows, dim)` -> `(batch_size, timesteps, dim)`, zero at padding."""
        padded = packed.new_zeros(self.batch_size * self.timesteps, packed.size(-1))
        return padded.index_copy(0, self.index, packed).view(
            self.batch_size, self.timesteps, packed.size(-1)
        )

    def sort_batch(self, per_sequence: torch.Tensor) -> torch.Tensor:
        """Reorders a `(batch_size, ...)` tensor (e.g. a dropout mask) into packing order."""
        return per_sequence.index_select(0, self.order.to(per_sequence.device))


def pack_by_length(mask: torch.BoolTensor) -> Optional[SequencePacking]:
    """
    The packing of a batch with the given `(batch_size, timesteps)` mask, or `None` when the mask
    is not a prefix mask (some padding before a real token). Costs one device-to-host copy.
    """
    batch_size, timesteps = mask.size()
    lengths = mask.sum(dim=1)
    positions = torch.arange(timesteps, device=mask.device)
    is_prefix = (mask == (positions.unsqueeze(0) < lengths.unsqueeze(1))).all()
    sorted_lengths, order = torch.sort(lengths, descending=True, stable=True)
    running = sorted_lengths.unsqueeze(0) > positions.unsqueeze(1)  # (timesteps, batch)
    *sizes, prefix = torch.cat([running.sum(dim=1), is_prefix.long().view(1)]).tolist()
    if not prefix:
        return None
    batch_sizes = [size for size in sizes if size > 0]
    offsets = [0] * len(batch_sizes)
    for t in range(1, len(batch_sizes)):
        offsets[t] = offsets[t - 1] + batch_sizes[t - 1]
    flat = order.unsqueeze(0) * timesteps + positions.unsqueeze(1)  # (timesteps, batch)
    return SequencePacking(batch_size, timesteps, batch_sizes, offsets, order, flat[running])


class RecurrenceConfig(NamedTuple):
    """The non-tensor arguments of [`LayerNormLstmRecurrence`](#layernormlstmrecurrence)."""

    batch_sizes: Sequence[int]
    offsets: Sequence[int]
    go_forward: bool
    cell_clip: Optional[float]
    projection_clip: Optional[float]
    layer_norm_eps: float


class _Step(NamedTuple):
    """One time step in processing order: its packed rows, and how many of them continue a
    sequence that was running at the previous step (the others start from a zero state)."""

    offset: int
    rows: int
    continued: int

    @property
    def packed_rows(self) -> slice:
        return slice(self.offset, self.offset + self.rows)

    def first_rows(self, count: int) -> slice:
        return slice(self.offset, self.offset + count)


def _steps(config: RecurrenceConfig) -> List[_Step]:
    """The steps of a recurrence in processing order (right to left when not `go_forward`)."""
    positions = range(len(config.batch_sizes))
    if not config.go_forward:
        positions = reversed(positions)
    steps: List[_Step] = []
    previous_rows = 0
    for t in positions:
        rows = config.batch_sizes[t]
        steps.append(_Step(config.offsets[t], rows, min(rows, previous_rows)))
        previous_rows = rows
    return steps


# ---------------------------------------------------------------------------------------------
# The elementwise work of one time step, written into preallocated buffers. `n` is the number of
# sequences running at the step, C the cell dimension, P the projection dimension. Gates are in
# the order (input, forget, memory, output), as in allennlp's `LstmCellWithProjection`. A clip of
# `None` disables clipping; the gradient of a clip passes where the value is strictly inside the
# clip range (`torch.clamp` also passes it at a bound exactly, a measure-zero difference).


def _cell_forward(
    gates: torch.Tensor,
    previous_cells: torch.Tensor,
    cells: torch.Tensor,
    cell_outputs: torch.Tensor,
    cell_clip: Optional[float],
) -> None:
    """
    `gates` `(n, 4C)`: pre-activations in, activations `(i, f, g, o)` out (in place).
    `previous_cells` `(n_continued, C)`: the memory of the first rows at the previous step (the
    other rows start from zero). Writes `cells = clip(i * g + f * previous)` and
    `cell_outputs = o * tanh(cells)`, both `(n, C)`.
    """
    C = cells.size(1)
    input_gate, forget_gate = gates[:, :C].sigmoid_(), gates[:, C : 2 * C].sigmoid_()
    memory_init, output_gate = gates[:, 2 * C : 3 * C].tanh_(), gates[:, 3 * C :].sigmoid_()
    torch.mul(input_gate, memory_init, out=cells)
    continued = previous_cells.size(0)
    if continued:
        cells[:continued].addcmul_(forget_gate[:continued], previous_cells)
    if cell_clip is not None:
        cells.clamp_(-cell_clip, cell_clip)
    torch.tanh(cells, out=cell_outputs)
    cell_outputs.mul_(output_gate)


def _norm_forward(
    projected: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    eps: float,
    dropout_mask: Optional[torch.Tensor],
    outputs: torch.Tensor,
    next_previous_states: Optional[torch.Tensor],
    means: torch.Tensor,
    rstds: torch.Tensor,
    projection_clip: Optional[float],
) -> None:
    """
    `projected` `(n, P)`: projected state in, clipped projected state out (in place). Writes
    `outputs = layer_norm(projected) * dropout_mask` `(n, P)` (no LayerNorm when `norm_weight` is
    `None`), its first rows into `next_previous_states` (the state the next step starts from),
    and the LayerNorm statistics `means`, `rstds` `(n,)`.
    """
    if projection_clip is not None:
        projected.clamp_(-projection_clip, projection_clip)
    if norm_weight is not None:
        normalized, row_means, row_rstds = torch.native_layer_norm(
            projected, [projected.size(1)], norm_weight, norm_bias, eps
        )
        means.copy_(row_means.view(-1))
        rstds.copy_(row_rstds.view(-1))
    else:
        normalized = projected
    if dropout_mask is not None:
        torch.mul(normalized, dropout_mask, out=outputs)
    else:
        outputs.copy_(normalized)
    if next_previous_states is not None:
        next_previous_states.copy_(outputs[: next_previous_states.size(0)])


def _norm_backward(
    grad_outputs: torch.Tensor,
    grad_state_carry: torch.Tensor,
    dropout_mask: Optional[torch.Tensor],
    projected: torch.Tensor,
    means: torch.Tensor,
    rstds: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    grad_norm_weight: Optional[torch.Tensor],
    grad_norm_bias: Optional[torch.Tensor],
    grad_projected: torch.Tensor,
    projection_clip: Optional[float],
) -> None:
    """
    Backward of `_norm_forward` for the gradient `grad_outputs + grad_state_carry` `(n, P)` of
    its output (from the layer's output and from the next step): writes the gradient of the
    unclipped projected state into `grad_projected` `(n, P)` and adds the LayerNorm parameter
    gradients to the float64 accumulators `grad_norm_weight`, `grad_norm_bias` `(P,)`.
    """
    grad = grad_outputs + grad_state_carry
    if dropout_mask is not None:
        grad.mul_(dropout_mask)
    if norm_weight is not None:
        grad_norm_bias.add_(grad.sum(0))
        grad, grad_weight_part, _ = torch.ops.aten.native_layer_norm_backward(
            grad,
            projected,
            [projected.size(1)],
            means.unsqueeze(1),
            rstds.unsqueeze(1),
            norm_weight,
            None,
            [True, True, False],
        )
        grad_norm_weight.add_(grad_weight_part)
    if projection_clip is not None:
        torch.mul(grad, projected.abs() < projection_clip, out=grad_projected)
    else:
        grad_projected.copy_(grad)


def _cell_backward(
    grad_cell_outputs: torch.Tensor,
    grad_cell_carry: torch.Tensor,
    activations: torch.Tensor,
    cells: torch.Tensor,
    previous_cells: torch.Tensor,
    grad_gates: torch.Tensor,
    cell_clip: Optional[float],
) -> None:
    """
    Backward of `_cell_forward`. `grad_cell_outputs` `(n, C)`: gradient of `cell_outputs`;
    `grad_cell_carry` `(n, C)`: gradient of `cells` from the next step in, gradient of the
    previous cells out (in place; rows past `previous_cells` are meaningless). Writes the
    pre-activation gradients into `grad_gates` `(n, 4C)`.
    """
    C = cells.size(1)
    input_gate, forget_gate = activations[:, :C], activations[:, C : 2 * C]
    memory_init, output_gate = activations[:, 2 * C : 3 * C], activations[:, 3 * C :]
    tanh_cells = torch.tanh(cells)
    # d/d cell: from the next step, plus through cell_outputs = o * tanh(cell).
    grad_cells = grad_cell_outputs * output_gate
    grad_cells.mul_(1 - tanh_cells * tanh_cells).add_(grad_cell_carry)
    if cell_clip is not None:
        grad_cells.mul_(cells.abs() < cell_clip)
    torch.mul(
        grad_cell_outputs * tanh_cells,
        output_gate * (1 - output_gate),
        out=grad_gates[:, 3 * C :],
    )
    torch.mul(grad_cells * memory_init, input_gate * (1 - input_gate), out=grad_gates[:, :C])
    torch.mul(
        grad_cells * input_gate, 1 - memory_init * memory_init, out=grad_gates[:, 2 * C : 3 * C]
    )
    continued = previous_cells.size(0)
    grad_forget = grad_gates[:, C : 2 * C]
    grad_forget[continued:].zero_()
    if continued:
        torch.mul(
            grad_cells[:continued] * previous_cells,
            forget_gate[:continued] * (1 - forget_gate[:continued]),
            out=grad_forget[:continued],
        )
    torch.mul(grad_cells, forget_gate, out=grad_cell_carry)


# ---------------------------------------------------------------------------------------------
# The recurrence of one layer and direction.


class RecurrenceWeights(NamedTuple):
    """
    The parameters of one `LayerNormLstmLayer`: `input_weight` `(4C, input_dim)`, `gate_bias`
    `(4C,)`, `state_weight` `(4C, P)`, `projection_weight` `(P, C)`, and `norm_weight`,
    `norm_bias` `(P,)` or `None` (no LayerNorm).
    """

    input_weight: torch.Tensor
    gate_bias: torch.Tensor
    state_weight: torch.Tensor
    projection_weight: torch.Tensor
    norm_weight: Optional[torch.Tensor]
    norm_bias: Optional[torch.Tensor]


class SavedForBackward(NamedTuple):
    """What `recurrence_forward` keeps for `recurrence_backward` (all `(num_rows, ...)` packed
    rows but the weights and the dropout mask)."""

    inputs: torch.Tensor
    input_weight: torch.Tensor
    state_weight: torch.Tensor
    projection_weight: torch.Tensor
    norm_weight: Optional[torch.Tensor]
    dropout_mask: Optional[torch.Tensor]
    activations: torch.Tensor  # gate activations (i, f, g, o)
    cells: torch.Tensor
    cell_outputs: torch.Tensor  # o * tanh(cell)
    projected: torch.Tensor  # clipped projected states, before LayerNorm
    previous_states: torch.Tensor  # the state each row started from (zero at a first step)
    means: torch.Tensor  # LayerNorm statistics
    rstds: torch.Tensor


def _forward_step(
    saved: SavedForBackward,
    outputs: torch.Tensor,
    step: _Step,
    previous: Optional[_Step],
    following: Optional[_Step],
    norm_bias: Optional[torch.Tensor],
    config: RecurrenceConfig,
) -> None:
    """Computes the rows of `step` in the buffers of `saved` and in `outputs`."""
    rows = step.packed_rows
    gates = saved.activations[rows]  # holds the input-to-gates product
    if previous is not None:  # a first step starts from a zero state
        gates.addmm_(saved.previous_states[rows], saved.state_weight.t())
    previous_cells = saved.cells[previous.first_rows(step.continued) if previous else slice(0, 0)]
    _cell_forward(
        gates, previous_cells, saved.cells[rows], saved.cell_outputs[rows], config.cell_clip
    )
    torch.mm(saved.cell_outputs[rows], saved.projection_weight.t(), out=saved.projected[rows])
    next_previous_states = None
    if following is not None:
        next_previous_states = saved.previous_states[following.first_rows(following.continued)]
    _norm_forward(
        saved.projected[rows],
        saved.norm_weight,
        norm_bias,
        config.layer_norm_eps,
        None if saved.dropout_mask is None else saved.dropout_mask[: step.rows],
        outputs[rows],
        next_previous_states,
        saved.means[rows],
        saved.rstds[rows],
        config.projection_clip,
    )


def recurrence_forward(
    inputs: torch.Tensor,
    weights: RecurrenceWeights,
    dropout_mask: Optional[torch.Tensor],
    config: RecurrenceConfig,
) -> Tuple[torch.Tensor, SavedForBackward]:
    """
    The forward pass of one layer and direction (no autograd): returns the states
    `(num_rows, projection_dim)` and what `recurrence_backward` needs.

    `inputs` `(num_rows, input_dim)` are packed rows; `dropout_mask` `(batch_size,
    projection_dim)` in packing order, or `None`.
    """
    num_rows, projection_dim = inputs.size(0), weights.state_weight.size(1)
    cell_dim = weights.state_weight.size(0) // 4
    norm_weight, norm_bias = weights.norm_weight, weights.norm_bias
    if norm_weight is not None:
        norm_weight, norm_bias = norm_weight.contiguous(), norm_bias.contiguous()
    saved = SavedForBackward(
        inputs=inputs,
        input_weight=weights.input_weight,
        state_weight=weights.state_weight,
        projection_weight=weights.projection_weight,
        norm_weight=norm_weight,
        dropout_mask=None if dropout_mask is None else dropout_mask.contiguous(),
        # The input-to-gates product of all time steps in one GEMM; each step adds its
        # state-to-gates product in place and turns the sum into gate activations.
        activations=torch.addmm(weights.gate_bias, inputs, weights.input_weight.t()),
        cells=inputs.new_empty(num_rows, cell_dim),
        cell_outputs=inputs.new_empty(num_rows, cell_dim),
        projected=inputs.new_empty(num_rows, projection_dim),
        previous_states=inputs.new_zeros(num_rows, projection_dim),
        means=inputs.new_empty(num_rows),
        rstds=inputs.new_empty(num_rows),
    )
    outputs = inputs.new_empty(num_rows, projection_dim)
    steps = _steps(config)
    for k, step in enumerate(steps):
        previous = steps[k - 1] if k > 0 else None
        following = steps[k + 1] if k + 1 < len(steps) else None
        _forward_step(saved, outputs, step, previous, following, norm_bias, config)
    return outputs, saved


class _BackwardBuffers(NamedTuple):
    grad_gates: torch.Tensor  # (num_rows, 4C), kept for the weight gradients
    grad_projected: torch.Tensor  # (num_rows, P), likewise
    grad_cell_outputs: torch.Tensor  # (max_rows, C), per step
    # Gradients flowing from step k + 1 into the state and cell of step k.
    grad_state_carry: torch.Tensor  # (max_rows, P)
    grad_cell_carry: torch.Tensor  # (max_rows, C)
    grad_norm_weight: Optional[torch.Tensor]  # float64 accumulators
    grad_norm_bias: Optional[torch.Tensor]

    @classmethod
    def allocate(cls, saved: SavedForBackward, max_rows: int) -> "_BackwardBuffers":
        num_rows, cell_dim = saved.cells.size()
        projection_dim = saved.state_weight.size(1)
        new_empty, new_zeros = saved.activations.new_empty, saved.activations.new_zeros
        grad_norm_weight = grad_norm_bias = None
        if saved.norm_weight is not None:
            grad_norm_weight = new_zeros(projection_dim, dtype=torch.float64)
            grad_norm_bias = new_zeros(projection_dim, dtype=torch.float64)
        return cls(
            grad_gates=new_empty(num_rows, 4 * cell_dim),
            grad_projected=new_empty(num_rows, projection_dim),
            grad_cell_outputs=new_empty(max_rows, cell_dim),
            grad_state_carry=new_zeros(max_rows, projection_dim),
            grad_cell_carry=new_zeros(max_rows, cell_dim),
            grad_norm_weight=grad_norm_weight,
            grad_norm_bias=grad_norm_bias,
        )


def _backward_step(
    saved: SavedForBackward,
    buffers: _BackwardBuffers,
    grad_outputs: torch.Tensor,
    step: _Step,
    previous: Optional[_Step],
    config: RecurrenceConfig,
) -> None:
    """Back-propagates through `step`: its rows of `grad_gates` and `grad_projected`, and the
    carries into the previous step."""
    rows, n = step.packed_rows, step.rows
    _norm_backward(
        grad_outputs[rows],
        buffers.grad_state_carry[:n],
        None if saved.dropout_mask is None else saved.dropout_mask[:n],
        saved.projected[rows],
        saved.means[rows],
        saved.rstds[rows],
        saved.norm_weight,
        buffers.grad_norm_weight,
        buffers.grad_norm_bias,
        buffers.grad_projected[rows],
        config.projection_clip,
    )
    torch.mm(
        buffers.grad_projected[rows], saved.projection_weight, out=buffers.grad_cell_outputs[:n]
    )
    previous_cells = saved.cells[previous.first_rows(step.continued) if previous else slice(0, 0)]
    _cell_backward(
        buffers.grad_cell_outputs[:n],
        buffers.grad_cell_carry[:n],
        saved.activations[rows],
        saved.cells[rows],
        previous_cells,
        buffers.grad_gates[rows],
        config.cell_clip,
    )
    if previous is not None:
        torch.mm(buffers.grad_gates[rows], saved.state_weight, out=buffers.grad_state_carry[:n])


def _recurrent_rows(steps: Sequence[_Step], num_rows: int, go_forward: bool) -> slice:
    """The packed rows whose previous state is not the zero state of a first step."""
    first = steps[0]
    if go_forward:
        return slice(first.offset + first.rows, num_rows)
    return slice(0, first.offset)


def _parameter_gradients(
    saved: SavedForBackward,
    buffers: _BackwardBuffers,
    steps: Sequence[_Step],
    config: RecurrenceConfig,
    needs_input_grads: Sequence[bool],
) -> Tuple[Optional[torch.Tensor], ...]:
    """The gradients of the inputs and weights from all rows at once (one GEMM each)."""
    needs = needs_input_grads
    grad_gates = buffers.grad_gates
    grads: List[Optional[torch.Tensor]] = [None] * 7
    if needs[0]:
        grads[0] = grad_gates.mm(saved.input_weight)
    if needs[1]:
        grads[1] = grad_gates.t().mm(saved.inputs)
    if needs[2]:
        grads[2] = grad_gates.sum(dim=0)
    if needs[3]:
        rows = _recurrent_rows(steps, grad_gates.size(0), config.go_forward)
        grads[3] = grad_gates[rows].t().mm(saved.previous_states[rows])
    if needs[4]:
        grads[4] = buffers.grad_projected.t().mm(saved.cell_outputs)
    if saved.norm_weight is not None:
        dtype = saved.norm_weight.dtype
        grads[5] = buffers.grad_norm_weight.to(dtype) if needs[5] else None
        grads[6] = buffers.grad_norm_bias.to(dtype) if needs[6] else None
    return tuple(grads)


def recurrence_backward(
    saved: SavedForBackward,
    grad_outputs: torch.Tensor,
    config: RecurrenceConfig,
    needs_input_grads: Sequence[bool] = (True,) * 7,
) -> Tuple[Optional[torch.Tensor], ...]:
    """
    The backward pass matching [`recurrence_forward`](#recurrence_forward): gradients of
    `(inputs, input_weight, gate_bias, state_weight, projection_weight, norm_weight, norm_bias)`,
    `None` where `needs_input_grads` is `False`.
    """
    grad_outputs = grad_outputs.contiguous()
    buffers = _BackwardBuffers.allocate(saved, max(config.batch_sizes))
    steps = _steps(config)
    for k in range(len(steps) - 1, -1, -1):
        previous = steps[k - 1] if k > 0 else None
        _backward_step(saved, buffers, grad_outputs, steps[k], previous, config)
    return _parameter_gradients(saved, buffers, steps, config, needs_input_grads)


_TENSORS_PER_RECURRENCE = 8  # inputs, the six `RecurrenceWeights`, the dropout mask


def _recurrence_forward_of_group(
    group: Sequence[Optional[torch.Tensor]], config: RecurrenceConfig
) -> Tuple[torch.Tensor, SavedForBackward]:
    inputs, *weights, dropout_mask = group
    return recurrence_forward(inputs, RecurrenceWeights(*weights), dropout_mask, config)


class LayerNormLstmRecurrence(torch.autograd.Function):
    """
    The recurrences of one or more independent layer directions (typically the forward and
    backward direction of one layer) as one autograd node, with a hand-written backward pass.

    `apply(runner, configs, *tensors)`: `configs` is a list of
    [`RecurrenceConfig`](#recurrenceconfig)s and `tensors` holds, for each, eight tensors: the
    packed inputs, the six [`RecurrenceWeights`](#recurrenceweights) and the dropout mask (see
    [`recurrence_forward`](#recurrence_forward)). `runner` (a
    [`ConcurrentRunner`](#concurrentrunner)) runs the directions' forward passes, and later their
    backward passes, concurrently when it can. Returns one states tensor per config.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, runner: "ConcurrentRunner", configs: List[RecurrenceConfig], *tensors
    ):
        n = _TENSORS_PER_RECURRENCE
        groups = [tensors[i * n : (i + 1) * n] for i in range(len(configs))]
        results = runner.run(
            [
                (lambda group=group, config=config: _recurrence_forward_of_group(group, config))
                for group, config in zip(groups, configs)
            ]
        )
        ctx.runner, ctx.configs = runner, configs
        ctx.save_for_backward(*(tensor for _, saved in results for tensor in saved))
        outputs = tuple(output for output, _ in results)
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grad_outputs):  # type: ignore[override]
        saved_tensors = ctx.saved_tensors
        per_config = len(SavedForBackward._fields)
        n = _TENSORS_PER_RECURRENCE
        tasks = []
        for index, config in enumerate(ctx.configs):
            saved = SavedForBackward(*saved_tensors[index * per_config : (index + 1) * per_config])
            needs = ctx.needs_input_grad[2 + index * n : 2 + (index + 1) * n]
            tasks.append(
                lambda saved=saved, grad=grad_outputs[index], config=config, needs=needs: (
                    recurrence_backward(saved, grad, config, needs[:7])
                )
            )
        grads: List[Optional[torch.Tensor]] = [None, None]  # runner, configs
        # Like the forward pass, the backward pass runs in the saved tensors' precision even when
        # `backward()` is called under autocast.
        device_type = saved_tensors[0].device.type
        with torch.autocast(device_type, enabled=False):
            results = ctx.runner.run(tasks)
        for result in results:
            grads.extend(result)
            grads.append(None)  # dropout mask
        return tuple(grads)


def run_recurrences(
    runner: "ConcurrentRunner",
    configs: List[RecurrenceConfig],
    tensors: List[Sequence[Optional[torch.Tensor]]],
) -> List[torch.Tensor]:
    """
    Runs [`LayerNormLstmRecurrence`](#layernormlstmrecurrence) on one group of eight tensors
    per config and returns the list of states.
    """
    flat = [tensor for group in tensors for tensor in group]
    outputs = LayerNormLstmRecurrence.apply(runner, configs, *flat)
    return list(outputs) if isinstance(outputs, tuple) else [outputs]


def _thread_counts_are_per_thread() -> bool:
    """
    Whether `torch.set_num_threads` called in one thread leaves the others' intra-op thread
    counts alone: true with PyTorch's OpenMP backend (the thread count is the calling thread's
    OpenMP setting, and MKL follows it), not with its native thread pool, which is shared.
    """
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


@contextmanager
def _intra_op_threads(threads: int) -> Iterator[None]:
    """Sets the calling thread's intra-op thread count for the block (see above)."""
    previous = torch.get_num_threads()
    if previous != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


class ConcurrentRunner:
    """
    Runs a few independent tasks (the two directions of a layer) concurrently: the first in the
    calling thread, the others in worker threads, each limited to its share of
    `torch.get_num_threads()` intra-op threads so that the machine is not oversubscribed. On two
    cores this keeps both busy through the single-threaded parts of a time step and avoids
    splitting each small per-step matrix product across cores.

    With `enabled=False`, or where thread counts are not per thread (PyTorch builds without the
    OpenMP backend), or with fewer than two intra-op threads, tasks run one after the other.
    Tasks run under `torch.no_grad()`.
    """

    _per_thread: Optional[bool] = None
    _executor: Optional[ThreadPoolExecutor] = None
    _executor_pid: Optional[int] = None
    _lock = threading.Lock()

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    @classmethod
    def _thread_counts_are_per_thread(cls) -> bool:
        if cls._per_thread is None:
            cls._per_thread = _thread_counts_are_per_thread()
        return cls._per_thread

    @classmethod
    def _get_executor(cls, workers: int) -> ThreadPoolExecutor:
        with cls._lock:
            # A forked child inherits the executor object but not its threads.
            if cls._executor is None or cls._executor_pid != os.getpid():
                cls._executor = ThreadPoolExecutor(workers, thread_name_prefix="elmoc-lstm")
                cls._executor_pid = os.getpid()
            return cls._executor

    def is_concurrent(self, num_tasks: int) -> bool:
        return (
            self.enabled
            and num_tasks > 1
            and torch.get_num_threads() >= num_tasks
            and not threading.current_thread().name.startswith("elmoc-lstm")
            and self._thread_counts_are_per_thread()
        )

    def run(self, tasks: Sequence[Callable[[], T]]) -> List[T]:
        if not self.is_concurrent(len(tasks)):
            with torch.no_grad():
                return [task() for task in tasks]
        share = max(1, torch.get_num_threads() // len(tasks))

        def limited(task: Callable[[], T]) -> T:
            with torch.no_grad(), _intra_op_threads(share):
                return task()

        executor = self._get_executor(len(tasks) - 1)
        futures = [executor.submit(limited, task) for task in tasks[1:]]
        # The calling thread's count is restored only after the workers are done: setting a
        # thread count also sets the default of threads that start later.
        with _intra_op_threads(share):
            try:
                first = limited(tasks[0])
            finally:
                rest = [future.result() for future in futures]
        return [first, *rest]
