"""The ELMo-C LSTM's fast path: a layer direction's recurrence, packed by length, with a hand-written backward."""

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

import torch

T = TypeVar("T")


class SequencePacking(NamedTuple):
    """
    Where each real position of a batch goes: packed row `offsets[t] + j` holds position t of the
    j-th longest sequence, for `j < batch_sizes[t]`. Built by [`pack_by_length`](#pack_by_length).
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
    """The packing of a `(batch_size, timesteps)` mask, or `None` if padding precedes a real token."""
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
    offsets = [0, *itertools.accumulate(batch_sizes[:-1])]
    flat = order.unsqueeze(0) * timesteps + positions.unsqueeze(1)  # (timesteps, batch)
    return SequencePacking(batch_size, timesteps, batch_sizes, offsets, order, flat[running])


class RecurrenceConfig(NamedTuple):
    """The non-tensor arguments of [`recurrence_forward`](#recurrence_forward)."""

    batch_sizes: Sequence[int]
    offsets: Sequence[int]
    go_forward: bool
    cell_clip: Optional[float]
    projection_clip: Optional[float]
    layer_norm_eps: float


class _Step(NamedTuple):
    """A step's packed rows, and how many of them continue a sequence running at the previous step."""

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
    order = list(positions if config.go_forward else reversed(positions))
    sizes = [config.batch_sizes[t] for t in order]
    return [
        _Step(config.offsets[t], rows, min(rows, previous))
        for t, rows, previous in zip(order, sizes, [0, *sizes])
    ]


class SavedForBackward(NamedTuple):
    """
    What `recurrence_forward` keeps for `recurrence_backward`. In mixed precision (bfloat16 or
    float16 inputs and weights) the matrix products' operands (`inputs`, the weights,
    `activations`, `cell_outputs`, `previous_states`) are in that low precision, and the cells,
    the projected states and the LayerNorm statistics in float32 (`wide_dtype`).
    """

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


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision of the cells, states and LayerNorm of a recurrence whose products run in
    `dtype`: float32 for bfloat16 and float16 (mixed precision), `dtype` itself otherwise."""
    return torch.promote_types(dtype, torch.float32)


def recurrence_forward(
    config: RecurrenceConfig,
    inputs: torch.Tensor,
    input_weight: torch.Tensor,
    gate_bias: torch.Tensor,
    state_weight: torch.Tensor,
    projection_weight: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    dropout_mask: Optional[torch.Tensor],
    for_backward: bool = True,
) -> Tuple[torch.Tensor, SavedForBackward]:
    """
    The forward pass of one layer direction (no autograd), gates in the order (input, forget, memory,
    output), on packed `inputs` `(num_rows, input_dim)`, the weights of `LstmCellWithProjection` (C cells,
    P projection), LayerNorm parameters `(P,)` or `None`, and a `(batch_size, P)` dropout mask in packing
    order or `None`. Returns the states `(num_rows, P)` and what `recurrence_backward` needs (without
    the LayerNorm statistics unless `for_backward`: a forward pass only; the same states).

    Mixed precision (issue #51): with `inputs` and the three weights in bfloat16 or float16, the
    matrix products and gate activations run in that precision; the gate bias, LayerNorm
    parameters and dropout mask are given in float32 (the master weights), and the cells, the
    LayerNorm (its statistics) and the returned states are float32 (`wide_dtype`).
    """
    num_rows, projection_dim = inputs.size(0), state_weight.size(1)
    C = state_weight.size(0) // 4
    wide = wide_dtype(inputs.dtype)
    if norm_weight is not None:
        norm_weight, norm_bias = norm_weight.contiguous(), norm_bias.contiguous()
    saved = SavedForBackward(
        inputs=inputs,
        input_weight=input_weight,
        state_weight=state_weight,
        projection_weight=projection_weight,
        norm_weight=norm_weight,
        dropout_mask=None if dropout_mask is None else dropout_mask.contiguous(),
        # The input-to-gates product of all steps; each step adds its state-to-gates product.
        activations=torch.addmm(gate_bias.to(inputs.dtype), inputs, input_weight.t()),
        cells=inputs.new_empty(num_rows, C, dtype=wide),
        cell_outputs=inputs.new_empty(num_rows, C),
        projected=inputs.new_empty(num_rows, projection_dim, dtype=wide),
        previous_states=inputs.new_zeros(num_rows, projection_dim),
        # Only kept for a backward pass (a frozen biLM's forward needs neither).
        means=inputs.new_empty(num_rows if for_backward else 0, dtype=wide),
        rstds=inputs.new_empty(num_rows if for_backward else 0, dtype=wide),
    )
    outputs = inputs.new_empty(num_rows, projection_dim, dtype=wide)
    steps = _steps(config)
    for k, step in enumerate(steps):
        rows, continued = step.packed_rows, step.continued
        gates, cells, cell_outputs = (
            saved.activations[rows],
            saved.cells[rows],
            saved.cell_outputs[rows],
        )
        if k > 0:  # a first step starts from a zero state
            gates.addmm_(saved.previous_states[rows], state_weight.t())
        input_gate, forget_gate = gates[:, :C].sigmoid_(), gates[:, C : 2 * C].sigmoid_()
        memory_init, output_gate = gates[:, 2 * C : 3 * C].tanh_(), gates[:, 3 * C :].sigmoid_()
        torch.mul(input_gate, memory_init, out=cells)
        if continued:
            previous_cells = saved.cells[steps[k - 1].first_rows(continued)]
            cells[:continued].addcmul_(forget_gate[:continued].to(wide), previous_cells)
        if config.cell_clip is not None:
            cells.clamp_(-config.cell_clip, config.cell_clip)
        torch.tanh(cells, out=cell_outputs)
        cell_outputs.mul_(output_gate)

        projected = saved.projected[rows]
        if wide == inputs.dtype:
            torch.mm(cell_outputs, projection_weight.t(), out=projected)
        else:
            projected.copy_(torch.mm(cell_outputs, projection_weight.t()))
        if config.projection_clip is not None:
            projected.clamp_(-config.projection_clip, config.projection_clip)
        normalized = projected
        if norm_weight is not None:
            normalized, means, rstds = torch.native_layer_norm(
                projected, [projection_dim], norm_weight, norm_bias, config.layer_norm_eps
            )
            if for_backward:
                saved.means[rows].copy_(means.view(-1))
                saved.rstds[rows].copy_(rstds.view(-1))
        if saved.dropout_mask is not None:
            torch.mul(normalized, saved.dropout_mask[: step.rows], out=outputs[rows])
        else:
            outputs[rows].copy_(normalized)
        if k + 1 < len(steps):  # the state the next step starts from
            following = steps[k + 1]
            next_rows = following.first_rows(following.continued)
            saved.previous_states[next_rows].copy_(outputs[step.first_rows(following.continued)])
    return outputs, saved


def recurrence_inference(
    config: RecurrenceConfig,
    input_gates: torch.Tensor,
    state_map: Callable[[torch.Tensor], torch.Tensor],
    state_bias: Optional[torch.Tensor],
    projection_map: Callable[[torch.Tensor], torch.Tensor],
    projection_dim: int,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
) -> torch.Tensor:
    """
    The forward pass of one layer direction for inference only (no dropout, nothing kept for a
    backward pass), with the linear maps as callables: `input_gates` `(num_rows, 4C)`, the packed
    inputs' input-to-gates product (no bias); `state_map`, the state-to-gates map with its bias
    `state_bias` (the gates of a zero state); `projection_map`, cells to the projected state. Each
    map returns float32 (whatever it computes in: `elmoc_allennlp.common.precision`); the gates,
    cells, states and LayerNorm are float32. Returns the states `(num_rows, projection_dim)`.
    """
    num_rows, C = input_gates.size(0), input_gates.size(1) // 4
    cells = input_gates.new_empty(num_rows, C)
    outputs = input_gates.new_empty(num_rows, projection_dim)
    steps = _steps(config)
    for k, step in enumerate(steps):
        rows, continued = step.packed_rows, step.continued
        if continued:
            previous = steps[k - 1].first_rows(continued)
            recurrent = state_map(outputs[previous])
            if continued < step.rows:  # sequences starting here start from a zero state
                zero_state = recurrent.new_zeros(step.rows - continued, recurrent.size(1))
                recurrent = torch.cat(
                    [recurrent, zero_state if state_bias is None else zero_state + state_bias]
                )
            gates = input_gates[rows] + recurrent
        elif state_bias is not None:
            gates = input_gates[rows] + state_bias
        else:
            gates = input_gates[rows].clone()
        input_gate, forget_gate = gates[:, :C].sigmoid_(), gates[:, C : 2 * C].sigmoid_()
        memory_init, output_gate = gates[:, 2 * C : 3 * C].tanh_(), gates[:, 3 * C :].sigmoid_()
        step_cells = cells[rows]
        torch.mul(input_gate, memory_init, out=step_cells)
        if continued:
            step_cells[:continued].addcmul_(forget_gate[:continued], cells[previous])
        if config.cell_clip is not None:
            step_cells.clamp_(-config.cell_clip, config.cell_clip)
        projected = projection_map(torch.tanh(step_cells).mul_(output_gate))
        if config.projection_clip is not None:
            projected = projected.clamp(-config.projection_clip, config.projection_clip)
        if norm_weight is not None:
            projected = torch.nn.functional.layer_norm(
                projected, [projection_dim], norm_weight, norm_bias, config.layer_norm_eps
            )
        outputs[rows] = projected
    return outputs


def recurrence_backward(
    saved: SavedForBackward,
    grad_outputs: torch.Tensor,
    config: RecurrenceConfig,
    needs_input_grads: Sequence[bool] = (True,) * 7,
) -> Tuple[Optional[torch.Tensor], ...]:
    """
    The backward pass of [`recurrence_forward`](#recurrence_forward): gradients of its tensor
    arguments but the dropout mask, `None` where `needs_input_grads` is `False`. A clip's
    gradient passes strictly inside its range.
    """
    grad_outputs = grad_outputs.contiguous()
    num_rows, C = saved.cells.size()
    wide = saved.cells.dtype
    projection_dim, max_rows = saved.state_weight.size(1), max(config.batch_sizes)
    new_empty, new_zeros = saved.activations.new_empty, saved.activations.new_zeros
    # In mixed precision the products' operands are low precision, the cell gradients float32.
    grad_gates = new_empty(num_rows, 4 * C)
    grad_projected = new_empty(num_rows, projection_dim)
    grad_cell_outputs = new_empty(max_rows, C)
    # Gradients flowing from step k + 1 into the state and cell of step k.
    grad_state_carry = new_zeros(max_rows, projection_dim)
    grad_cell_carry = new_zeros(max_rows, C, dtype=wide)
    norm_weight = saved.norm_weight
    if norm_weight is not None:  # float64 accumulators
        grad_norm_weight = new_zeros(projection_dim, dtype=torch.float64)
        grad_norm_bias = new_zeros(projection_dim, dtype=torch.float64)
    steps = _steps(config)
    for k in range(len(steps) - 1, -1, -1):
        step = steps[k]
        rows, n, continued = step.packed_rows, step.rows, step.continued
        projected, cells = saved.projected[rows], saved.cells[rows]
        grad = grad_outputs[rows] + grad_state_carry[:n]
        if saved.dropout_mask is not None:
            grad.mul_(saved.dropout_mask[:n])
        if norm_weight is not None:
            grad_norm_bias.add_(grad.sum(0))
            grad, grad_weight_part, _ = torch.ops.aten.native_layer_norm_backward(
                grad,
                projected,
                [projection_dim],
                saved.means[rows].unsqueeze(1),
                saved.rstds[rows].unsqueeze(1),
                norm_weight,
                None,
                [True, True, False],
            )
            grad_norm_weight.add_(grad_weight_part)
        if config.projection_clip is not None:
            torch.mul(grad, projected.abs() < config.projection_clip, out=grad_projected[rows])
        else:
            grad_projected[rows].copy_(grad)
        torch.mm(grad_projected[rows], saved.projection_weight, out=grad_cell_outputs[:n])

        activations, step_grad_gates = saved.activations[rows], grad_gates[rows]
        input_gate, forget_gate = activations[:, :C], activations[:, C : 2 * C]
        memory_init, output_gate = activations[:, 2 * C : 3 * C], activations[:, 3 * C :]
        tanh_cells = torch.tanh(cells)
        # d/d cell: from the next step, plus through cell_outputs = o * tanh(cell).
        grad_cells = grad_cell_outputs[:n].to(wide) * output_gate
        grad_cells.mul_(1 - tanh_cells * tanh_cells).add_(grad_cell_carry[:n])
        if config.cell_clip is not None:
            grad_cells.mul_(cells.abs() < config.cell_clip)
        torch.mul(
            grad_cell_outputs[:n] * tanh_cells,
            output_gate * (1 - output_gate),
            out=step_grad_gates[:, 3 * C :],
        )
        torch.mul(
            grad_cells * memory_init, input_gate * (1 - input_gate), out=step_grad_gates[:, :C]
        )
        torch.mul(
            grad_cells * input_gate,
            1 - memory_init * memory_init,
            out=step_grad_gates[:, 2 * C : 3 * C],
        )
        grad_forget = step_grad_gates[:, C : 2 * C]
        grad_forget[continued:].zero_()
        if continued:
            previous_cells = saved.cells[steps[k - 1].first_rows(continued)]
            torch.mul(
                grad_cells[:continued] * previous_cells,
                forget_gate[:continued] * (1 - forget_gate[:continued]),
                out=grad_forget[:continued],
            )
        torch.mul(grad_cells, forget_gate, out=grad_cell_carry[:n])
        if k > 0:
            torch.mm(step_grad_gates, saved.state_weight, out=grad_state_carry[:n])

    grads: List[Optional[torch.Tensor]] = [None] * 7
    if needs_input_grads[0]:
        grads[0] = grad_gates.mm(saved.input_weight)
    if needs_input_grads[1]:
        grads[1] = grad_gates.t().mm(saved.inputs)
    if needs_input_grads[2]:  # the gate bias is given in float32 in mixed precision
        grads[2] = grad_gates.sum(dim=0, dtype=wide)
    if needs_input_grads[3]:  # the rows whose previous state is not the zero state of a first step
        first = steps[0]
        recurrent = (
            slice(first.offset + first.rows, num_rows)
            if config.go_forward
            else slice(0, first.offset)
        )
        grads[3] = grad_gates[recurrent].t().mm(saved.previous_states[recurrent])
    if needs_input_grads[4]:
        grads[4] = grad_projected.t().mm(saved.cell_outputs)
    if norm_weight is not None:
        grads[5] = grad_norm_weight.to(norm_weight.dtype) if needs_input_grads[5] else None
        grads[6] = grad_norm_bias.to(norm_weight.dtype) if needs_input_grads[6] else None
    return tuple(grads)


_TENSORS_PER_RECURRENCE = 8  # the tensor arguments of `recurrence_forward`


class LayerNormLstmRecurrence(torch.autograd.Function):
    """
    The recurrences of independent layer directions as one autograd node. `apply(runner, configs,
    *tensors)`: for each config, the eight tensor arguments of `recurrence_forward`, run by
    `runner`, a [`ConcurrentRunner`](#concurrentrunner). Returns one states tensor per config.
    """

    @staticmethod
    def forward(ctx, runner: "ConcurrentRunner", configs: List[RecurrenceConfig], *tensors):  # type: ignore[override]
        n = _TENSORS_PER_RECURRENCE
        groups = [tensors[i * n : (i + 1) * n] for i in range(len(configs))]
        # Nothing to keep where no input needs a gradient (a frozen biLM): no backward comes.
        for_backward = any(ctx.needs_input_grad[2:])
        results = runner.run(
            [
                partial(recurrence_forward, config, *group, for_backward=for_backward)
                for group, config in zip(groups, configs)
            ]
        )
        ctx.runner, ctx.configs = runner, configs
        if for_backward:
            ctx.save_for_backward(*(tensor for _, saved in results for tensor in saved))
        return tuple(output for output, _ in results)

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
                partial(recurrence_backward, saved, grad_outputs[index], config, needs[:7])
            )
        grads: List[Optional[torch.Tensor]] = [None, None]  # runner, configs
        # As the forward pass, run in the saved tensors' precision even under autocast.
        with torch.autocast(saved_tensors[0].device.type, enabled=False):
            results = ctx.runner.run(tasks)
        for result in results:
            grads.extend(result)
            grads.append(None)  # dropout mask
        return tuple(grads)


def run_recurrences(
    runner: "ConcurrentRunner",
    directions: Sequence[Tuple[RecurrenceConfig, Sequence[Optional[torch.Tensor]]]],
) -> List[torch.Tensor]:
    """Runs [`LayerNormLstmRecurrence`](#layernormlstmrecurrence) on `(config, tensors)` pairs."""
    configs = [config for config, _ in directions]
    flat = [tensor for _, tensors in directions for tensor in tensors]
    return list(LayerNormLstmRecurrence.apply(runner, configs, *flat))


@contextmanager
def _intra_op_threads(threads: int) -> Iterator[None]:
    """Sets the calling thread's intra-op thread count for the block."""
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
    Runs a few independent tasks under `torch.no_grad()`: the first in the calling thread, the
    others in worker threads, each with its share of intra-op threads; in turn unless `enabled`,
    with an intra-op thread per task and per-thread counts (OpenMP backend).
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
            cls._per_thread = "parallel backend: OpenMP" in torch.__config__.parallel_info()
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
        # Restore only after the workers finish: a thread count is also later threads' default.
        with _intra_op_threads(share):
            try:
                first = limited(tasks[0])
            finally:
                rest = [future.result() for future in futures]
        return [first, *rest]
