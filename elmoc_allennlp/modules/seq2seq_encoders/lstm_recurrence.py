"""
The fast path of the ELMo-C LSTM (`seq2seq_encoders.layer_norm_lstm`): the recurrence of a
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
  GEMM before the recurrence (done by autograd, so its weight and input gradients are also one
  GEMM each). In the backward pass the gradients of the recurrent and projection weights are
  accumulated as one GEMM each over all rows at the end, instead of autograd's one rank-`batch`
  update per step (which reads and writes the whole weight gradient every step).
* **Only what the recurrence needs per step**: two GEMMs forward (state to gates, cell to
  projection) and two backward, written into preallocated buffers, plus two fused elementwise
  kernels each way ([`seq2seq_encoders.fused_lstm_cell`](fused_lstm_cell.md)). The backward
  pass stores gate activations, cells, projected states and LayerNorm statistics, and recomputes
  only `tanh(cell)`.
* **Both directions at once** ([`ConcurrentRunner`](#concurrentrunner)). The forward and backward
  directions of a layer are independent; on CPU their forward passes, and later their backward
  passes, run in two threads with half of the intra-op threads each.

Nothing here needs a compiler, and it runs on any device: the elementwise kernels are either the C
ones (CPU) or PyTorch operations (anywhere).
"""
import ctypes
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

import torch

from elmoc_allennlp.modules.seq2seq_encoders.fused_lstm_cell import LstmCellKernels

logger = logging.getLogger(__name__)
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
    kernels: LstmCellKernels


def _steps(config: RecurrenceConfig) -> List[Tuple[int, int, int]]:
    """`(offset, rows, rows shared with the previous step)` in processing order."""
    positions = range(len(config.batch_sizes))
    if not config.go_forward:
        positions = reversed(positions)
    steps: List[Tuple[int, int, int]] = []
    previous_rows = 0
    for t in positions:
        rows = config.batch_sizes[t]
        steps.append((config.offsets[t], rows, min(rows, previous_rows)))
        previous_rows = rows
    return steps


def recurrence_forward(
    inputs: torch.Tensor,
    input_weight: torch.Tensor,
    gate_bias: torch.Tensor,
    state_weight: torch.Tensor,
    projection_weight: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    dropout_mask: Optional[torch.Tensor],
    config: RecurrenceConfig,
) -> Tuple[torch.Tensor, Tuple[Optional[torch.Tensor], ...]]:
    """
    The forward pass of one layer and direction (no autograd): returns the states
    `(num_rows, projection_dim)` and what `recurrence_backward` needs.

    `inputs` `(num_rows, input_dim)` are packed rows; `input_weight` `(4 * cell_dim, input_dim)`,
    `gate_bias` `(4 * cell_dim,)`, `state_weight` `(4 * cell_dim, projection_dim)` and
    `projection_weight` `(projection_dim, cell_dim)` are the weights of `LayerNormLstmLayer`;
    `norm_weight`, `norm_bias` `(projection_dim,)` or `None` (no LayerNorm); `dropout_mask`
    `(batch_size, projection_dim)` in packing order, or `None`.
    """
    kernels = config.kernels
    num_rows, projection_dim = inputs.size(0), state_weight.size(1)
    cell_dim = state_weight.size(0) // 4
    if norm_weight is not None:
        norm_weight, norm_bias = norm_weight.contiguous(), norm_bias.contiguous()
    if dropout_mask is not None:
        dropout_mask = dropout_mask.contiguous()
    state_to_gates = state_weight.t()
    cell_to_state = projection_weight.t()

    def new(*size: int) -> torch.Tensor:
        return inputs.new_empty(size)

    # Input-to-gates product of all time steps in one GEMM, into the buffer that each step then
    # adds its state-to-gates product to (in place) and turns into gate activations.
    activations = torch.addmm(gate_bias, inputs, input_weight.t())
    cells, cell_outputs = new(num_rows, cell_dim), new(num_rows, cell_dim)
    projected, outputs = new(num_rows, projection_dim), new(num_rows, projection_dim)
    # The state each row starts from (zero at a sequence's first step).
    previous_states = inputs.new_zeros(num_rows, projection_dim)
    means, rstds = new(num_rows), new(num_rows)

    steps = _steps(config)
    for k, (offset, rows, shared) in enumerate(steps):
        rows_now = slice(offset, offset + rows)
        gates = activations[rows_now]
        if k:  # the first step starts from a zero state
            gates.addmm_(previous_states[rows_now], state_to_gates)
        previous_offset = steps[k - 1][0] if k else 0
        kernels.cell_forward(
            gates,
            cells[previous_offset : previous_offset + shared],
            cells[rows_now],
            cell_outputs[rows_now],
            config.cell_clip,
        )
        torch.mm(cell_outputs[rows_now], cell_to_state, out=projected[rows_now])
        next_previous = None
        if k + 1 < len(steps):
            next_offset, _, next_shared = steps[k + 1]
            next_previous = previous_states[next_offset : next_offset + next_shared]
        kernels.norm_forward(
            projected[rows_now],
            norm_weight,
            norm_bias,
            config.layer_norm_eps,
            None if dropout_mask is None else dropout_mask[:rows],
            outputs[rows_now],
            next_previous,
            means[rows_now],
            rstds[rows_now],
            config.projection_clip,
        )
    saved = (
        inputs,
        input_weight,
        state_weight,
        projection_weight,
        norm_weight,
        dropout_mask,
        activations,
        cells,
        cell_outputs,
        projected,
        previous_states,
        means,
        rstds,
    )
    return outputs, saved


def recurrence_backward(
    saved: Sequence[Optional[torch.Tensor]],
    grad_outputs: torch.Tensor,
    config: RecurrenceConfig,
    needs_input_grads: Sequence[bool] = (True,) * 7,
) -> Tuple[Optional[torch.Tensor], ...]:
    """
    The backward pass matching [`recurrence_forward`](#recurrence_forward): gradients of
    `(inputs, input_weight, gate_bias, state_weight, projection_weight, norm_weight, norm_bias)`,
    `None` where `needs_input_grads` is `False`.
    """
    kernels = config.kernels
    (
        inputs,
        input_weight,
        state_weight,
        projection_weight,
        norm_weight,
        dropout_mask,
        activations,
        cells,
        cell_outputs,
        projected,
        previous_states,
        means,
        rstds,
    ) = saved
    grad_outputs = grad_outputs.contiguous()
    num_rows, cell_dim = cells.size()
    projection_dim = state_weight.size(1)
    max_rows = max(config.batch_sizes)

    grad_gates = activations.new_empty(num_rows, 4 * cell_dim)
    grad_projected = activations.new_empty(num_rows, projection_dim)
    grad_cell_outputs = activations.new_empty(max_rows, cell_dim)
    # Gradients flowing from step k + 1 into the state and cell of step k.
    grad_state_carry = activations.new_zeros(max_rows, projection_dim)
    grad_cell_carry = activations.new_zeros(max_rows, cell_dim)
    grad_norm_weight = grad_norm_bias = None
    if norm_weight is not None:
        grad_norm_weight = activations.new_zeros(projection_dim, dtype=torch.float64)
        grad_norm_bias = activations.new_zeros(projection_dim, dtype=torch.float64)

    steps = _steps(config)
    for k in range(len(steps) - 1, -1, -1):
        offset, rows, shared = steps[k]
        rows_now = slice(offset, offset + rows)
        kernels.norm_backward(
            grad_outputs[rows_now],
            grad_state_carry[:rows],
            None if dropout_mask is None else dropout_mask[:rows],
            projected[rows_now],
            means[rows_now],
            rstds[rows_now],
            norm_weight,
            grad_norm_weight,
            grad_norm_bias,
            grad_projected[rows_now],
            config.projection_clip,
        )
        torch.mm(grad_projected[rows_now], projection_weight, out=grad_cell_outputs[:rows])
        previous_offset = steps[k - 1][0] if k else 0
        kernels.cell_backward(
            grad_cell_outputs[:rows],
            grad_cell_carry[:rows],
            activations[rows_now],
            cells[rows_now],
            cells[previous_offset : previous_offset + shared],
            grad_gates[rows_now],
            config.cell_clip,
        )
        if k:
            torch.mm(grad_gates[rows_now], state_weight, out=grad_state_carry[:rows])

    needs = needs_input_grads
    grads: List[Optional[torch.Tensor]] = [None] * 7
    if needs[0]:
        grads[0] = grad_gates.mm(input_weight)
    if needs[1]:
        grads[1] = grad_gates.t().mm(inputs)
    if needs[2]:
        grads[2] = grad_gates.sum(dim=0)
    if needs[3]:
        # The first step's previous state is zero: leave its rows out of the product.
        first_offset, first_rows, _ = steps[0]
        if config.go_forward:
            recurrent_rows = slice(first_offset + first_rows, num_rows)
        else:
            recurrent_rows = slice(0, first_offset)
        grads[3] = grad_gates[recurrent_rows].t().mm(previous_states[recurrent_rows])
    if needs[4]:
        grads[4] = grad_projected.t().mm(cell_outputs)
    if grad_norm_weight is not None:
        grads[5] = grad_norm_weight.to(norm_weight.dtype) if needs[5] else None
        grads[6] = grad_norm_bias.to(norm_weight.dtype) if needs[6] else None
    return tuple(grads)


_TENSORS_PER_RECURRENCE = 8


class LayerNormLstmRecurrence(torch.autograd.Function):
    """
    The recurrences of one or more independent layer directions (typically the forward and
    backward direction of one layer) as one autograd node, with a hand-written backward pass.

    `apply(runner, configs, *tensors)`: `configs` is a list of
    [`RecurrenceConfig`](#recurrenceconfig)s and `tensors` holds, for each, the eight tensor
    arguments of [`recurrence_forward`](#recurrence_forward). `runner` (a
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
                (lambda group=group, config=config: recurrence_forward(*group, config))
                for group, config in zip(groups, configs)
            ]
        )
        ctx.runner, ctx.configs = runner, configs
        ctx.saved_lengths = [len(saved) for _, saved in results]
        ctx.save_for_backward(*(tensor for _, saved in results for tensor in saved))
        outputs = tuple(output for output, _ in results)
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grad_outputs):  # type: ignore[override]
        saved_tensors = ctx.saved_tensors
        saved, start = [], 0
        for length in ctx.saved_lengths:
            saved.append(saved_tensors[start : start + length])
            start += length
        n = _TENSORS_PER_RECURRENCE
        tasks = []
        for index, config in enumerate(ctx.configs):
            needs = ctx.needs_input_grad[2 + index * n : 2 + (index + 1) * n]
            tasks.append(
                lambda index=index, config=config, needs=needs: recurrence_backward(
                    saved[index], grad_outputs[index], config, needs[:7]
                )
            )
        grads: List[Optional[torch.Tensor]] = [None, None]
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


class _IntraOpThreads:
    """
    Per-thread control of PyTorch's intra-op threads on Linux builds whose parallel backend is
    OpenMP: `omp_set_num_threads` sets the calling thread's OpenMP thread count (what ATen's
    `parallel_for` and oneDNN use), and MKL's `mkl_set_num_threads_local`, when PyTorch exports
    it, the calling thread's MKL thread count. Unavailable elsewhere.
    """

    def __init__(self) -> None:
        self.omp_set_num_threads = self.omp_get_max_threads = None
        self.mkl_set_num_threads_local = None
        try:
            if sys.platform != "linux" or "OpenMP" not in torch.__config__.parallel_info():
                return
            # Only the libraries PyTorch itself loaded (other packages may bring their own
            # OpenMP runtime, whose thread settings would not affect PyTorch).
            torch_libraries = os.path.join(os.path.dirname(torch.__file__), "lib")
            with open("/proc/self/maps") as maps:
                loaded = sorted(
                    {
                        line.split()[-1]
                        for line in maps
                        if line.rstrip().endswith(".so") or ".so." in line
                    }
                )
            loaded = [path for path in loaded if os.path.dirname(path) == torch_libraries]
            for path in loaded:
                if os.path.basename(path).startswith(("libgomp", "libiomp5", "libomp")):
                    library = ctypes.CDLL(path)
                    self.omp_set_num_threads = library.omp_set_num_threads
                    self.omp_set_num_threads.argtypes = [ctypes.c_int]
                    self.omp_get_max_threads = library.omp_get_max_threads
                    self.omp_get_max_threads.restype = ctypes.c_int
                    break
            for path in loaded:
                if os.path.basename(path).startswith("libtorch_cpu"):
                    library = ctypes.CDLL(path)
                    # The C interface (mkl_service.h maps mkl_set_num_threads_local to it; the
                    # lower-case symbol is the Fortran one, which takes a pointer).
                    if hasattr(library, "MKL_Set_Num_Threads_Local"):
                        self.mkl_set_num_threads_local = library.MKL_Set_Num_Threads_Local
                        self.mkl_set_num_threads_local.argtypes = [ctypes.c_int]
                        self.mkl_set_num_threads_local.restype = ctypes.c_int
                    break
        except Exception as error:  # no per-thread control: directions then run one by one
            logger.info("No per-thread control of intra-op threads: %s", error)
            self.omp_set_num_threads = self.omp_get_max_threads = None

    @property
    def available(self) -> bool:
        return self.omp_set_num_threads is not None

    @contextmanager
    def limit(self, threads: int) -> Iterator[None]:
        torch.get_num_threads()  # PyTorch's per-thread initialisation must not undo ours
        previous = self.omp_get_max_threads()
        self.omp_set_num_threads(threads)
        previous_mkl = None
        if self.mkl_set_num_threads_local is not None:
            previous_mkl = self.mkl_set_num_threads_local(threads)
        try:
            yield
        finally:
            self.omp_set_num_threads(previous)
            if previous_mkl is not None:
                self.mkl_set_num_threads_local(previous_mkl)


class ConcurrentRunner:
    """
    Runs a few independent tasks (the two directions of a layer) concurrently: the first in the
    calling thread, the others in worker threads, each limited to its share of
    `torch.get_num_threads()` intra-op threads so that the machine is not oversubscribed. On two
    cores this keeps both busy through the single-threaded parts of a time step and avoids
    splitting each small per-step matrix product across cores.

    With `enabled=False`, or where per-thread thread limits are not available (see
    `_IntraOpThreads`), or with fewer than two intra-op threads, tasks run one after the other.
    Tasks run under `torch.no_grad()`.
    """

    _threads: Optional[_IntraOpThreads] = None
    _executor: Optional[ThreadPoolExecutor] = None
    _executor_pid: Optional[int] = None
    _lock = threading.Lock()

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    @classmethod
    def _intra_op_threads(cls) -> _IntraOpThreads:
        if cls._threads is None:
            cls._threads = _IntraOpThreads()
        return cls._threads

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
            and self._intra_op_threads().available
        )

    def run(self, tasks: Sequence[Callable[[], T]]) -> List[T]:
        if not self.is_concurrent(len(tasks)):
            with torch.no_grad():
                return [task() for task in tasks]
        threads = self._intra_op_threads()
        share = max(1, torch.get_num_threads() // len(tasks))

        def limited(task: Callable[[], T]) -> T:
            with torch.no_grad(), threads.limit(share):
                return task()

        executor = self._get_executor(len(tasks) - 1)
        futures = [executor.submit(limited, task) for task in tasks[1:]]
        try:
            first = limited(tasks[0])
        finally:
            rest = [future.result() for future in futures]
        return [first, *rest]
