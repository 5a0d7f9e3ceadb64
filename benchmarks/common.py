"""
What the benchmarks (and `scripts/soak_test.py`) share, written once: synthetic inputs (a
fastText `.bin` with random vectors, written by `write_fasttext_bin` (also the tests' fixtures) and
read like a trained one; a Zipfian corpus in shards, the One Billion Word layout), timers and a
peak-memory meter that work on CPU and CUDA, and a one-line description of the machine.

Run the benchmarks as modules from the repository root (`python -m benchmarks.output_layers`);
they import this one as `benchmarks.common`.
"""

import itertools
import os
import platform
import struct
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np


def write_one_step_bilm_config(
    config: Path,
    fasttext: Path,
    corpus: Path,
    embedding_dim: int,
    projection_dim: int,
    cell_dim: int,
) -> Path:
    """
    `config`: training_configs/pretrain/elmoc.libsonnet's ELMo-C biLM of the given sizes, for one
    epoch of sentence batches of 16 at a constant learning rate (a benchmark's biLM trained a step:
    its weights are as good as random).
    """
    import json

    settings = {
        "fasttext_path": str(fasttext),
        "embedding_dim": embedding_dim,
        "train_data_path": str(corpus),
        "projection_dim": projection_dim,
        "cell_dim": cell_dim,
        "mode": "sentence",
        "batch_size": 16,
        "num_epochs": 1,
        "learning_rate": 1e-3,
        "warmup_steps": 0,
        "decay_start": 1,
        "decay_end": 2,
        "num_replicas": 1,
    }
    library = (
        Path(__file__).resolve().parents[1] / "training_configs" / "pretrain" / "elmoc.libsonnet"
    )
    config.write_text(f"(import '{library}').config({json.dumps(settings)})\n", encoding="utf-8")
    return config


def random_fasttext(
    path: Path,
    num_words: int,
    bucket: int,
    dim: int,
    seed: int = 0,
    scale: float = 1.0,
    maxn: int = 6,
) -> Path:
    """
    `</s>` and the words `w0` .. `w{num_words - 2}`, random N(0, scale^2) vectors, written in
    blocks (any size fits in memory); kept if `path` exists.
    """
    if path.exists():
        return path
    words = ["</s>"] + [f"w{index}" for index in range(num_words - 1)]
    rng = np.random.default_rng(seed)

    def blocks(rows: int = num_words + bucket, block: int = 1 << 16) -> Iterator[np.ndarray]:
        for start in range(0, rows, block):
            yield rng.standard_normal(
                (min(block, rows - start), dim), dtype=np.float32
            ) * np.float32(scale)

    return write_fasttext_bin(path, words, blocks(), minn=3, maxn=maxn, bucket=bucket)


def zipf_corpus(
    directory: Path,
    sentences: int,
    shards: int,
    seed: int = 0,
    vocabulary_size: int = 5000,
    lengths: Tuple[int, int] = (5, 40),
) -> List[Path]:
    """`shards` files `news.en-XXXXX-of-YYYYY` of Zipfian sentences over `w0` ..; their paths."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    vocabulary = np.array([f"w{index}" for index in range(vocabulary_size)])
    ranks = np.arange(1, vocabulary_size + 1)
    probabilities = (1.0 / ranks) / (1.0 / ranks).sum()
    paths = []
    for shard in range(shards):
        sentence_lengths = rng.integers(lengths[0], lengths[1], size=sentences // shards)
        words = rng.choice(vocabulary_size, size=int(sentence_lengths.sum()), p=probabilities)
        ends = np.cumsum(sentence_lengths)
        lines = [
            " ".join(vocabulary[words[end - length : end]])
            for end, length in zip(ends, sentence_lengths)
        ]
        path = directory / f"news.en-{shard:05d}-of-{shards:05d}"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def synchronize(device) -> None:
    import torch

    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize()


class Timer:
    """
    Wall-clock and process CPU time (all threads) of a call. On CUDA the wall time comes from
    CUDA events around the call, after the device has finished earlier work. On a shared CPU
    machine the CPU time is the steadier measure of the work done (other processes stretch the
    wall time, not the CPU time).
    """

    def __init__(self, device) -> None:
        self.cuda = getattr(device, "type", device) == "cuda"

    def time(self, function: Callable[[], None]) -> Dict[str, float]:
        import torch

        cpu_started = time.process_time()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            function()
            end.record()
            torch.cuda.synchronize()
            wall = start.elapsed_time(end) / 1000.0
        else:
            started = time.perf_counter()
            function()
            wall = time.perf_counter() - started
        return {"wall": wall, "cpu": time.process_time() - cpu_started}


def fastest(timings: List[Dict[str, float]]) -> Dict[str, float]:
    """The minimum of repeated `Timer` timings, per clock (the least disturbed run)."""
    return {clock: min(timing[clock] for timing in timings) for clock in ("wall", "cpu")}


def _proc_status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class MemoryMeter:
    """
    Peak memory since `reset()`, in bytes above what was in use when the meter was made. On CUDA
    `torch.cuda.max_memory_allocated`; on CPU the process' peak resident set (Linux `VmHWM`,
    reset through `/proc/self/clear_refs`; where that is refused the peak stays monotone, which
    is still right for growing batches, and `can_reset` is False).
    """

    def __init__(self, device) -> None:
        import torch

        self.cuda = getattr(device, "type", device) == "cuda"
        self.can_reset = True
        if self.cuda:
            torch.cuda.synchronize()
            self.baseline = torch.cuda.memory_allocated()
        else:
            self.baseline = _proc_status_kb("VmRSS") * 1024

    def reset(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return
        try:
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")  # resets VmHWM to the current VmRSS
        except OSError:
            self.can_reset = False

    def peak(self) -> int:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.baseline
        return _proc_status_kb("VmHWM") * 1024 - self.baseline


def machine_description(device: str = "cpu") -> str:
    """CPU model, cores, RAM, torch and Python versions, and the GPU if `device` is CUDA."""
    import torch

    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError):
        memory_gb = float("nan")
    description = (
        f"{cpu}, {os.cpu_count()} cores, {memory_gb:.0f} GB RAM; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {platform.python_version()}"
    )
    if str(device).startswith("cuda"):
        description += (
            f"; GPU {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}"
        )
    return description


def run_logged(
    command: List[str],
    log: Path,
    environment: Optional[Dict[str, str]] = None,
    cwd: Optional[Path] = None,
    timeout: Optional[float] = None,
) -> float:
    """
    Runs `command` (in `environment`, default this process') with its output in `log`; its
    wall-clock seconds, or an error naming the command, the log and the log's end if it fails.
    The examples' drivers and the benchmarks run their commands through this.
    """
    import subprocess

    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as output:
        completed = subprocess.run(
            command,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            timeout=timeout,
        )
    if completed.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise RuntimeError(
            f"failed ({completed.returncode}): {' '.join(command)}; see {log}:\n{tail}"
        )
    return time.perf_counter() - started


def write_fasttext_bin(
    path: Union[str, os.PathLike],
    words: Sequence[str],
    input_matrix: Union[np.ndarray, Iterable[np.ndarray]],
    *,
    minn: int,
    maxn: int,
    bucket: int,
    counts: Optional[Sequence[int]] = None,
    model: str = "skipgram",
) -> Path:
    """
    Writes an unsupervised fastText `.bin` (zeros for the output matrix) atomically, in the format
    `FastTextVectors` reads (its constants): fixtures for tests and synthetic models for
    benchmarks, read like a trained one.

    # Parameters

    path : `Union[str, os.PathLike]`
        Where to write the model.
    words : `Sequence[str]`
        The dictionary, in id order (distinct, no NUL characters; fastText's models have `</s>`).
    input_matrix : `Union[np.ndarray, Iterable[np.ndarray]]`
        Shape `(len(words) + bucket, dim)`: word rows, then n-gram bucket rows. Or an iterable of
        row blocks of shape `(rows, dim)` that together make that matrix, written as they come
        (a model larger than memory); the file is only created if they add up.
    minn, maxn, bucket : `int`
        Character n-gram lengths and number of hash buckets (`maxn = 0`: no n-grams).
    counts : `Sequence[int]`, optional
        Word frequencies (default: all 1).
    model : `str`, optional (default=`"skipgram"`)
        `"skipgram"` or `"cbow"`.
    """
    from allennlp.common.checks import ConfigurationError

    from elmoc_allennlp.fasttext import vectors as fasttext_format
    from elmoc_allennlp.common.atomic_files import atomic_write
    from elmoc_allennlp.common.checks import check_one_of

    path = Path(path)
    blocks: Iterator[np.ndarray] = iter(
        [input_matrix] if isinstance(input_matrix, np.ndarray) else input_matrix
    )
    first = _checked_block(next(blocks, None), None)
    expected_rows = len(words) + bucket
    dim = first.shape[1]
    if isinstance(input_matrix, np.ndarray) and first.shape[0] != expected_rows:
        raise ConfigurationError(
            f"input_matrix has shape {first.shape}, expected ({expected_rows}, dim)"
        )
    if len(set(words)) != len(words) or any("\0" in word for word in words):
        raise ConfigurationError("words must be distinct and contain no NUL characters")
    if maxn > 0 and bucket <= 0:
        raise ConfigurationError("character n-grams (maxn > 0) need bucket > 0")
    check_one_of(model, ["cbow", "skipgram"], "model")
    counts = [1] * len(words) if counts is None else list(counts)
    if len(counts) != len(words):
        raise ConfigurationError(f"{len(counts)} counts for {len(words)} words")
    model_id = 1 if model == "cbow" else 2
    # dim, ws, epoch, minCount, neg, wordNgrams, loss (ns), model, bucket, minn, maxn, lrUpdateRate, t.
    args = (dim, 5, 5, 1, 5, 1, 2, model_id, bucket, minn, maxn, 100, 1e-4)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "wb") as out:
        out.write(
            struct.pack("<ii", fasttext_format.FASTTEXT_MAGIC, fasttext_format.FASTTEXT_VERSION)
        )
        out.write(fasttext_format._ARGS.pack(*args))
        out.write(
            fasttext_format._DICTIONARY_HEADER.pack(len(words), len(words), 0, sum(counts), -1)
        )
        out.write(
            b"".join(
                fasttext_format._encode(word) + b"\0" + fasttext_format._ENTRY_TAIL.pack(count, 0)
                for word, count in zip(words, counts)
            )
        )
        out.write(b"\0" + fasttext_format._MATRIX_HEADER.pack(expected_rows, dim))
        written = 0
        for block in itertools.chain([first], blocks):
            block = _checked_block(block, dim)
            written += block.shape[0]
            if written > expected_rows:
                break
            out.write(memoryview(block).cast("B"))
        if written != expected_rows:
            # Raised inside atomic_write: nothing is left at `path`.
            raise ConfigurationError(
                f"input_matrix blocks have {written}{'+' if written > expected_rows else ''} rows, "
                f"expected {expected_rows} (len(words) + bucket)"
            )
        out.write(b"\0" + fasttext_format._MATRIX_HEADER.pack(len(words), dim))
        zeros = bytes(min(len(words), 65536) * dim * 4)
        for start in range(0, len(words), 65536):
            out.write(zeros[: (min(len(words), start + 65536) - start) * dim * 4])
    return path


def _checked_block(block: Optional[np.ndarray], dim: Optional[int]) -> np.ndarray:
    from allennlp.common.checks import ConfigurationError

    if block is None:
        raise ConfigurationError("input_matrix has no rows")
    block = np.ascontiguousarray(block, dtype="<f4")
    if block.ndim != 2 or block.shape[1] < 1 or (dim is not None and block.shape[1] != dim):
        raise ConfigurationError(
            f"input_matrix block has shape {block.shape}, expected (rows, {dim or 'dim'})"
        )
    return block
