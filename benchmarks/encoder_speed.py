"""
Speed of one bidirectional LSTM-with-projection layer, forward + backward, float32 on CPU
(or on a GPU with `--device cuda`):

* `allennlp LstmCellWithProjection`: two of them (one per direction), clipping on;
* `nn.LSTM(proj_size)`: `torch.nn.LSTM(P, C, proj_size=P, bidirectional=True)`, the fused baseline
  (no LayerNorm, no clipping, no recurrent dropout) that every ratio is relative to;
* `elmoc_lstm reference`, `elmoc_lstm fast`, ...: `LayerNormLstm(P, P, C, num_layers=1)` (LayerNorm in
  the recurrence, clipping, variational recurrent dropout 0.1, training mode) with each
  `implementation`; these include the encoder's input projection and LayerNorm (a P x P product,
  ~1% of the work), which the first two rows do not have.

Every method runs once per round, in a rotating order, `--rounds` times after warm-up; a method's
ratio is the median over rounds of its time divided by nn.LSTM's time in the same round (robust to
other load on the machine), its time the median over rounds. tokens/s counts real tokens of both
directions' input (batch x timesteps). The FLOP bound is the layer's matrix-product FLOPs
(forward 2 x tokens x (4C x 2P + C x P) per direction, backward twice that) divided by the rate of a
2048^3 float32 matmul measured in the same run.

On CUDA every timed call ends with `torch.cuda.synchronize()` (the GPU's work, not just its
launch, is timed) and the table adds each method's peak memory, `torch.cuda.max_memory_allocated`
during one call above what was allocated before it.

    python -m benchmarks.encoder_speed                     # the three shapes of the README table
    python -m benchmarks.encoder_speed --shapes medium --rounds 9
    python -m benchmarks.encoder_speed --device cuda --shapes paper_full paper --rounds 20
"""

import argparse
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Callable, Dict, List, NamedTuple

import torch

from allennlp.modules.lstm_cell_with_projection import LstmCellWithProjection

from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import LayerNormLstm


class Shape(NamedTuple):
    name: str
    batch: int
    timesteps: int
    projection: int
    cell: int


SHAPES = {
    "medium": Shape("medium (B32 T20 P512 C2048)", 32, 20, 512, 2048),
    "quickstart": Shape("quickstart (B64 T25 P256 C1024)", 64, 25, 256, 1024),
    "paper": Shape("paper C/P, small batch (B16 T20 P512 C4096)", 16, 20, 512, 4096),
    # The paper's shape with a per-GPU batch of the authors' size (GPU only).
    "paper_full": Shape("paper, full batch (B128 T20 P512 C4096)", 128, 20, 512, 4096),
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_gflops(device: torch.device) -> float:
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    a @ b
    synchronize(device)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * 2048**3 / statistics.median(times) / 1e9


def layer_gflop(shape: Shape) -> float:
    tokens = shape.batch * shape.timesteps
    P, C = shape.projection, shape.cell
    forward = 2 * tokens * (4 * C * 2 * P + C * P)
    return 2 * 3 * forward / 1e9  # two directions; backward = 2 x forward


def make_methods(shape: Shape, device: torch.device) -> Dict[str, Callable[[], None]]:
    torch.manual_seed(0)
    B, T, P, C = shape.batch, shape.timesteps, shape.projection, shape.cell
    inputs = torch.randn(B, T, P, device=device, requires_grad=True)
    mask = torch.ones(B, T, dtype=torch.bool, device=device)
    grad = torch.randn(B, T, 2 * P, device=device)

    cells = [
        LstmCellWithProjection(
            P,
            P,
            C,
            go_forward=go_forward,
            memory_cell_clip_value=3.0,
            state_projection_clip_value=3.0,
            recurrent_dropout_probability=0.1,
        )
        for go_forward in (True, False)
    ]
    lstm = torch.nn.LSTM(P, C, proj_size=P, batch_first=True, bidirectional=True)
    elmoc = LayerNormLstm(P, P, C, num_layers=1, recurrent_dropout=0.1)
    for module in (*cells, lstm, elmoc):
        module.to(device)
        module.train()

    def allennlp_cells() -> None:
        outputs = [cell(inputs, [T] * B)[0] for cell in cells]
        (torch.cat(outputs, -1) * grad).sum().backward()

    def nn_lstm() -> None:
        (lstm(inputs)[0] * grad).sum().backward()

    def ours(implementation: str, parallel: bool) -> Callable[[], None]:
        def run() -> None:
            elmoc.implementation = implementation
            elmoc.parallel_directions = parallel
            (elmoc(inputs, mask) * grad).sum().backward()

        return run

    methods = {
        "allennlp LstmCellWithProjection": allennlp_cells,
        "nn.LSTM(proj_size)": nn_lstm,
        "elmoc_lstm reference": ours("reference", False),
        "elmoc_lstm fast (default: auto)": ours("auto", True),
        "  fast, directions one by one": ours("auto", False),
    }
    return methods


def measure_rows(
    shape: Shape, rounds: int, gflops: float, device: torch.device
) -> List[Dict[str, float]]:
    """Per method: median ms, tokens/s, median ratio to nn.LSTM, x FLOP bound, peak MiB (CUDA)."""
    methods = make_methods(shape, device)
    names = list(methods)
    cuda = device.type == "cuda"
    peak_mib: Dict[str, float] = {}
    for name in names:  # warm-up (and the one-time kernel build); peak memory of one call
        methods[name]()
        synchronize(device)
        if cuda:
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        methods[name]()
        synchronize(device)
        if cuda:
            peak_mib[name] = (torch.cuda.max_memory_allocated(device) - before) / 2**20
    times: Dict[str, List[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            start = time.perf_counter()
            methods[name]()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    baseline = times["nn.LSTM(proj_size)"]
    tokens = 2 * shape.batch * shape.timesteps
    bound_ms = layer_gflop(shape) / gflops * 1e3
    rows = []
    for name in names:
        median = statistics.median(times[name])
        rows.append(
            {
                "method": name,
                "ms": median * 1e3,
                "tokens_per_second": tokens / median,
                "ratio_to_nn_lstm": statistics.median(t / b for t, b in zip(times[name], baseline)),
                "x_flop_bound": median * 1e3 / bound_ms,
                "peak_mib": peak_mib.get(name),
            }
        )
    return rows


def measure(shape: Shape, rounds: int, gflops: float, device: torch.device) -> List[str]:
    """The rows of `measure_rows` as a Markdown table under a heading line."""
    cuda = device.type == "cuda"
    bound_ms = layer_gflop(shape) / gflops * 1e3
    lines = [
        f"**{shape.name}** — {layer_gflop(shape):.1f} GFLOP per step; FLOP bound "
        f"{bound_ms:.0f} ms at {gflops:.0f} GFLOP/s",
        "",
        "| method | ms (median) | tokens/s | ratio to nn.LSTM (median) | x FLOP bound |"
        + (" peak MB |" if cuda else ""),
        "|---|---:|---:|---:|---:|" + ("---:|" if cuda else ""),
    ]
    for row in measure_rows(shape, rounds, gflops, device):
        lines.append(
            f"| {row['method']} | {row['ms']:.0f} | {row['tokens_per_second']:,.0f} "
            f"| {row['ratio_to_nn_lstm']:.2f} | "
            f"{row['x_flop_bound']:.1f} |" + (f" {row['peak_mib']:,.0f} |" if cuda else "")
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes", nargs="+", choices=sorted(SHAPES), default=["medium", "quickstart", "paper"]
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device is available")
        torch.cuda.set_device(device)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
        + (
            f"; GPU {torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}"
            if device.type == "cuda"
            else ""
        )
    )
    for key in args.shapes:
        gflops = matmul_gflops(device)
        print()
        print("\n".join(measure(SHAPES[key], args.rounds, gflops, device)))
        sys.stdout.flush()
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
