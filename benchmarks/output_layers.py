#!/usr/bin/env python
"""
The output-layer efficiency benchmark of ELMo-C (Li et al., TACL 2019, Table 4), re-measured:
the same frozen-fastText input, the same LayerNorm LSTM and the same biLM model class
(`elmoc_bilm`, real forward and backward, Adam step); only the output layer changes. Plus a
whole-model row: ELMo (character-CNN input + sampled softmax). Each model is the `model` section
of its baseline in training_configs/pretrain/baselines.libsonnet (`VARIANTS`), at the sizes below.

    python -m benchmarks.output_layers                 # default sizes: ~10 min on 2 CPU cores
    python -m benchmarks.output_layers --paper-sizes   # the paper's sizes (meant for a GPU)

For every layer (and vocabulary size 40K / 800K / 2,000K where it matters) it reports:

- Params: trainable parameters of the whole model;
- Batch: the largest batch (sentences of `--seq-len` words; a power of two found by doubling
  from 8, capped at `--max-batch`) whose peak memory stays within `--budget-gb`;
- S1: time of one training step (forward, backward, optimizer step) at batch size 1;
- S2: time to train on `--tokens` words at that largest batch, optimizer steps included;
- Mem: peak memory of a training step at the common batch `--memory-batch`;
- Out%: the share of a training step (at `--memory-batch`) spent outside the embedder and
  encoder: the output layer, its gradient and optimizer step, and the model's loss bookkeeping
  (1 - encoder-only step time / full step time);

each also as a ratio to Cont (the continuous output layer), all measured in the same run. Every
(layer, vocabulary) runs in its own subprocess, so peak-memory figures are independent.

Memory on CPU is the process' peak resident set (Linux `VmHWM`, reset before each measured step
through `/proc/self/clear_refs`) minus its resident set after imports, with `MALLOC_ARENA_MAX=2`;
it includes parameters, gradients, optimizer state, activations and the touched part of the
memory-mapped fastText table. On CUDA it is `torch.cuda.max_memory_allocated` and times come from
CUDA events. Inputs are synthetic: a synthetic fastText `.bin` (same format and embedder as
training), Zipfian word ids over a frequency-sorted vocabulary, ~15 fastText rows per word.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from benchmarks.common import MemoryMeter, Timer, fastest, machine_description, random_fasttext

REPO_ROOT = Path(__file__).resolve().parents[1]

# The paper's S2 ratios to Cont (Table 4), for reference in the printed table.
PAPER_S2_RATIOS = {
    ("fixed", None): 1.24,
    ("subword", None): 1.53,
    ("adaptive", 800_000): 1.47,
    ("sampled", 800_000): 1.35,
    ("sampled", 2_000_000): 2.35,
}
# Adaptive softmax cutoffs per vocabulary size (see training_configs/pretrain/baselines.libsonnet:
# with a 512-d state they give the paper's 97M / 196M / 213M), scaled to the vocabulary.
ADAPTIVE = {
    40_000: ([10_000, 20_000, 30_000], 1.0),
    800_000: ([100_000, 600_000, 740_000], 4.0),
    2_000_000: ([100_000, 400_000, 1_850_000], 4.0),
}
LABELS = {
    "cont": "Cont",
    "fixed": "Fixed",
    "subword": "Subword",
    "adaptive": "Adaptive",
    "sampled": "Sampled",
    "full": "Full",
    "elmo": "ELMo (char-CNN + Sampled)",
}
# The variant of training_configs/pretrain/baselines.libsonnet that each row measures.
VARIANTS = {
    "cont": "elmoc_oneb",
    "fixed": "fixed",
    "subword": "elmo_sub",
    "adaptive": "elmo_a",
    "sampled": "sampled",
    "full": "full",
    "elmo": "elmo",
}
FASTTEXT_ROWS_PER_WORD = 15  # a 5-letter word: its own row + 14 character n-grams (3 to 6)

SIZES = {
    # Default: fits ~10 minutes on 2 CPU cores. The encoder is 16x smaller in cell x state
    # than the paper's, so the output layer's share of a step is larger than at paper size.
    "default": dict(
        cell_dim=1024,
        projection_dim=128,
        embedding_dim=300,
        vocab_sizes=[40_000, 800_000, 2_000_000],
        seq_len=20,
        tokens=10_240,
        budget_gb=4.0,
        max_batch=256,
        memory_batch=32,
        full_softmax_max_vocab=40_000,
        subword_vocab=32_000,
        char_cnn_highway=2,
    ),
    # The paper's: 2 x 4096 -> 512 LSTM, 300-d fastText, 793,471 = "800K" words; a 12 GB GPU.
    "paper": dict(
        cell_dim=4096,
        projection_dim=512,
        embedding_dim=300,
        vocab_sizes=[40_000, 793_471, 2_000_000],
        seq_len=20,
        tokens=409_600,
        budget_gb=12.0,
        max_batch=4096,
        memory_batch=128,
        full_softmax_max_vocab=40_000,
        subword_vocab=32_000,
        char_cnn_highway=2,
    ),
}


# ============================================================================ worker side


def _source_hashes() -> Dict[str, str]:
    """Hashes of the code under test, to detect files edited while the benchmark ran."""
    import hashlib

    hashes = {}
    for relative in (
        "elmoc_allennlp/modules/seq2seq_encoders/layer_norm_lstm.py",
        "elmoc_allennlp/models/bidirectional_language_model.py",
        "elmoc_allennlp/modules/output_layers/continuous_output.py",
        "elmoc_allennlp/modules/output_layers/sampled_softmax.py",
        "elmoc_allennlp/modules/output_layers/adaptive_softmax.py",
        "elmoc_allennlp/modules/output_layers/softmax.py",
        "elmoc_allennlp/modules/token_embedders/fasttext_token_embedder.py",
        "training_configs/pretrain/baselines.libsonnet",
        "training_configs/pretrain/elmoc.libsonnet",
    ):
        path = REPO_ROOT / relative
        if path.exists():
            hashes[relative] = hashlib.sha1(path.read_bytes()).hexdigest()[:12]
    return hashes


class BatchMaker:
    """Synthetic batches: Zipfian word ids over a frequency-sorted vocabulary."""

    def __init__(self, job: Dict[str, Any], seed: int = 0) -> None:
        import numpy as np

        self.job = job
        self.random = np.random.RandomState(seed)
        vocab = job["vocab_size"] or job["fasttext_words"]
        self.vocab = vocab
        ranks = np.arange(1, vocab - 1, dtype=np.float64)  # ids 2.. (0 padding, 1 OOV)
        self.cdf = np.cumsum(1.0 / ranks)
        self.cdf /= self.cdf[-1]
        words, bucket = job["fasttext_words"], job["fasttext_bucket"]
        word_ids = np.arange(words, dtype=np.int64)[:, None]
        ngram_ids = (
            words + (word_ids * 2654435761 + np.arange(1, FASTTEXT_ROWS_PER_WORD) * 40503) % bucket
        )
        # Indexer convention: row + 1 (0 is padding).
        self.fasttext_rows = np.concatenate([word_ids, ngram_ids], axis=1) + 1

    def zipf(self, shape):
        import numpy as np

        return 2 + np.searchsorted(self.cdf, self.random.random_sample(shape))

    def make(self, batch_size: int, device):
        import numpy as np
        import torch

        kind = self.job["kind"]
        seq_len = self.job["seq_len"]
        if kind == "subword":
            seq_len = int(round(seq_len * self.job["subword_ratio"]))
        ids = self.zipf((batch_size, seq_len))
        tensors: Dict[str, Dict[str, torch.Tensor]] = {}
        if kind == "subword":
            tensors["subwords"] = {"tokens": torch.from_numpy(ids)}
        elif kind == "elmo":
            chars = np.full((batch_size, seq_len, 50), 261, dtype=np.int64)
            chars[:, :, 0] = 259
            chars[:, :, 1:8] = self.random.randint(98, 123, size=(batch_size, seq_len, 7))
            chars[:, :, 8] = 260
            tensors["elmo_characters"] = {"elmo_tokens": torch.from_numpy(chars)}
        else:
            rows = self.fasttext_rows[ids % self.job["fasttext_words"]]
            tensors["fasttext"] = {
                "subword_ids": torch.from_numpy(rows),
                "mask": torch.ones(batch_size, seq_len, dtype=torch.bool),
            }
        if kind != "cont":
            tensors["targets"] = {"tokens": torch.from_numpy(ids)}
        return {
            key: {name: tensor.to(device) for name, tensor in value.items()}
            for key, value in tensors.items()
        }


def model_params(job: Dict[str, Any]) -> Dict[str, Any]:
    """The `model` section of the job's row, from training_configs/pretrain/baselines.libsonnet."""
    import _jsonnet

    settings = {
        "fasttext_path": job["fasttext_path"],
        "embedding_dim": job["embedding_dim"],
        "train_data_path": "unused",
        "projection_dim": job["projection_dim"],
        "cell_dim": job["cell_dim"],
        "num_layers": 2,
        "dropout": 0.1,
        # One input projection and one output layer for both directions, in every row.
        "separate_input_projections": False,
        "separate_output_layers": False,
        "num_samples": 8192,
        "sparse_softmax": True,
        "char_cnn_highway_layers": job["char_cnn_highway"],
    }
    if job["kind"] == "adaptive":
        settings.update(cutoffs=job["cutoffs"], div_value=job["div_value"])
    if job.get("char_cnn_filters"):  # default: ELMo's 2048 filters
        settings["char_cnn_filters"] = job["char_cnn_filters"]
    config = _jsonnet.evaluate_snippet(
        "output_layers",
        "(import 'baselines.libsonnet').variant(std.extVar('variant'), std.extVar('settings')).model",
        jpathdir=str(REPO_ROOT / "training_configs" / "pretrain"),
        ext_vars={"variant": VARIANTS[job["kind"]]},
        ext_codes={"settings": json.dumps(settings)},
    )
    params = json.loads(config)
    if job["kind"] == "fixed":
        # A random frozen table of the fastText dimension: the synthetic vocabulary has no words.
        del params["output_layer"]["pretrained_file"]
        params["output_layer"]["embedding_dim"] = job["embedding_dim"]
    return params


def build_model(job: Dict[str, Any]):
    from allennlp.common import Params
    from allennlp.data import Vocabulary
    from allennlp.models import Model

    import elmoc_allennlp  # noqa: F401  (registers the model and its modules)

    class SizedVocabulary(Vocabulary):
        """Namespace sizes only: the heads need nothing else, and 2M strings would cost RAM."""

        def __init__(self, sizes: Dict[str, int]) -> None:
            super().__init__()
            self._sizes = sizes

        def get_vocab_size(self, namespace: str = "tokens") -> int:
            return self._sizes.get(namespace, 2)

    size = job["vocab_size"] or 2
    vocab = SizedVocabulary({"targets": size, "subwords": size})
    return Model.from_params(vocab=vocab, params=Params(model_params(job)))


class Optimizer:
    """
    allennlp's `DenseSparseAdam` (Adam for dense gradients, sparse Adam for the sampled softmax's
    output rows) with the dense gradients' norm clipped to 1, as in the configs.
    """

    def __init__(self, parameters, lr: float = 1e-3) -> None:
        self.parameters = [p for p in parameters if p.requires_grad]
        self.lr = lr
        self.optimizer = None

    def zero_grad(self) -> None:
        for parameter in self.parameters:
            parameter.grad = None

    def step(self) -> None:
        import torch
        from allennlp.training.optimizers import DenseSparseAdam

        if self.optimizer is None:  # the parameters that get gradients, known after one backward
            trained = [p for p in self.parameters if p.grad is not None]
            self.optimizer = DenseSparseAdam(
                [(str(i), p) for i, p in enumerate(trained)], lr=self.lr
            )
        torch.nn.utils.clip_grad_norm_(
            [p for p in self.parameters if p.grad is not None and not p.grad.is_sparse], 1.0
        )
        self.optimizer.step()


def run_worker(job: Dict[str, Any]) -> Dict[str, Any]:
    import torch

    import allennlp.modules  # noqa: F401  (imports count in the baseline, not in the model)
    import allennlp.training.optimizers  # noqa: F401
    import elmoc_allennlp.models.bidirectional_language_model  # noqa: F401

    torch.manual_seed(0)
    device = torch.device(job["device"])
    batches = BatchMaker(job)
    meter = MemoryMeter(device)  # baseline: after imports and the synthetic data
    timer = Timer(device)
    model = build_model(job).to(device)
    model.train()
    output_parameters = {
        id(p): p for d in ("forward", "backward") for p in model.output_layer(d).parameters()
    }.values()
    optimizer = Optimizer(model.parameters())
    parameters = optimizer.parameters
    result: Dict[str, Any] = {
        "params": sum(p.numel() for p in parameters),
        "output_params": sum(p.numel() for p in output_parameters if p.requires_grad),
        "baseline_bytes": meter.baseline,
        "memory_reset": True,
    }

    def step(batch) -> None:
        optimizer.zero_grad()
        model(tokens=batch)["loss"].backward()
        optimizer.step()

    # S1: batch size 1 (after a warm-up step, which also allocates the optimizer state).
    one = batches.make(1, device)
    step(one)
    result["s1"] = fastest([timer.time(lambda: step(one)) for _ in range(job["repeats"])])

    # Largest batch within the budget, by doubling; peak memory at every probe.
    budget = job["budget_gb"] * 1024**3
    peaks: Dict[int, int] = {}
    batch_size, largest = 8, None
    while batch_size <= job["max_batch"] or batch_size <= job["memory_batch"]:
        batch = batches.make(batch_size, device)
        meter.reset()
        try:
            step(batch)
        except RuntimeError as error:  # CUDA out of memory
            if "out of memory" not in str(error):
                raise
            peaks[batch_size] = -1
            break
        peaks[batch_size] = meter.peak()
        if peaks[batch_size] <= budget and batch_size <= job["max_batch"]:
            largest = batch_size
        elif batch_size >= job["memory_batch"]:
            break
        batch_size *= 2
    result["memory_reset"] = meter.can_reset
    result["peaks"] = peaks
    result["mem"] = peaks.get(job["memory_batch"])
    result["batch"] = largest

    # S2: time to train on `tokens` words at the largest batch (already warmed up by its probe).
    if largest is not None:
        words_per_batch = largest * job["seq_len"]
        num_steps = max(2, math.ceil(job["tokens"] / words_per_batch))
        step_batches = [batches.make(largest, device) for _ in range(num_steps)]
        timings = [timer.time(lambda b=b: step(b)) for b in step_batches]
        scale = job["tokens"] / (num_steps * words_per_batch)
        result["s2_steps"] = num_steps
        result["s2"] = {clock: scale * sum(t[clock] for t in timings) for clock in ("wall", "cpu")}
        result["words_per_second"] = {
            clock: job["tokens"] / result["s2"][clock] for clock in ("wall", "cpu")
        }

    # Time share of the output layer at the memory batch: full step vs encoder-only step.
    batch = batches.make(job["memory_batch"], device)
    output_ids = {id(p) for p in output_parameters}
    encoder_parameters = [
        p for p in model.parameters() if p.requires_grad and id(p) not in output_ids
    ]
    encoder_optimizer = Optimizer(encoder_parameters)

    def encoder_step() -> None:
        encoder_optimizer.zero_grad()
        tokens = {key: value for key, value in batch.items() if key != "targets"}
        mask = next(iter(tokens.values())).get("mask")
        embedded = model.text_field_embedder(tokens)
        if mask is None:
            from allennlp.nn import util

            mask = util.get_text_field_mask(tokens)
        contextual = model.contextualizer(embedded, mask)
        contextual.pow(2).mean().backward()
        encoder_optimizer.step()

    encoder_step()
    full_times, encoder_times = [], []
    for _ in range(job["repeats"]):
        full_times.append(timer.time(lambda: step(batch)))
        encoder_times.append(timer.time(encoder_step))
    full, encoder_only = fastest(full_times), fastest(encoder_times)
    result["step_at_memory_batch"] = full
    result["encoder_step_at_memory_batch"] = encoder_only
    result["output_share"] = {
        clock: max(0.0, 1.0 - encoder_only[clock] / full[clock]) for clock in ("wall", "cpu")
    }
    result["sources"] = _source_hashes()
    return result


# ============================================================================ driver side


def make_jobs(args, sizes: Dict[str, Any], fasttext_path: Path) -> List[Dict[str, Any]]:
    common = dict(
        cell_dim=sizes["cell_dim"],
        projection_dim=sizes["projection_dim"],
        embedding_dim=sizes["embedding_dim"],
        seq_len=sizes["seq_len"],
        tokens=sizes["tokens"],
        budget_gb=sizes["budget_gb"],
        max_batch=sizes["max_batch"],
        memory_batch=sizes["memory_batch"],
        char_cnn_highway=sizes["char_cnn_highway"],
        subword_ratio=args.subword_ratio,
        repeats=args.repeats,
        device=args.device,
        fasttext_path=str(fasttext_path),
        fasttext_words=args.fasttext_words,
        fasttext_bucket=args.fasttext_bucket,
    )
    vocab_sizes = sizes["vocab_sizes"]
    middle = vocab_sizes[len(vocab_sizes) // 2]
    jobs = [dict(common, kind="cont", vocab_size=None)]
    jobs.append(dict(common, kind="fixed", vocab_size=middle + 2))
    jobs.append(dict(common, kind="subword", vocab_size=sizes["subword_vocab"] + 4))
    for size in vocab_sizes:
        paper_size = min(ADAPTIVE, key=lambda known: abs(math.log(known / size)))
        cutoffs, div_value = ADAPTIVE[paper_size]
        scaled = [max(1, int(round(c * size / paper_size))) for c in cutoffs]
        while div_value > 1 and sizes["projection_dim"] // div_value ** len(scaled) < 1:
            div_value /= 2
        jobs.append(
            dict(common, kind="adaptive", vocab_size=size + 2, cutoffs=scaled, div_value=div_value)
        )
    for size in vocab_sizes:
        jobs.append(dict(common, kind="sampled", vocab_size=size + 2))
    for size in vocab_sizes:
        if size <= sizes["full_softmax_max_vocab"]:
            jobs.append(dict(common, kind="full", vocab_size=size + 2))
    jobs.append(dict(common, kind="elmo", vocab_size=middle + 2))
    if args.only:
        jobs = [job for job in jobs if job["kind"] in args.only]
    return jobs


def run_job(
    job: Dict[str, Any], timeout: float, environment: Optional[Dict[str, str]] = None
) -> Dict[str, Any]:
    """One job in its own process (`python -m benchmarks.output_layers --worker JOB`); its result."""
    environment = dict(
        environment or os.environ,
        MALLOC_ARENA_MAX="2",
        TOKENIZERS_PARALLELISM="false",
        OMP_WAIT_POLICY="PASSIVE",
    )
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.output_layers", "--worker", json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=str(REPO_ROOT),
    )
    if completed.returncode != 0:
        sys.stderr.write(completed.stderr[-3000:])
        return {
            "error": f"exit code {completed.returncode}",
            "stderr_tail": completed.stderr[-1500:],
        }
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1])
    result["wall"] = time.perf_counter() - started
    result["load_average"] = os.getloadavg()[0]
    return result


def _ratio(value, reference) -> Optional[float]:
    if value is None or reference in (None, 0):
        return None
    return value / reference


def _millions(count: int) -> str:
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e6:.3f}M"


def _vocab_label(vocab_size: Optional[int], kind: str) -> str:
    if kind == "cont":
        return "open"
    words = vocab_size - 2 if kind != "subword" else vocab_size - 4
    return f"{words / 1000:.0f}K" + (" BPE" if kind == "subword" else "")


def _paper_ratio(job: Dict[str, Any]) -> Optional[float]:
    """The paper's S2 ratio for this row ("800K" is the 793,471-word vocabulary at paper size)."""
    if job["kind"] in ("fixed", "subword"):
        return PAPER_S2_RATIOS.get((job["kind"], None))
    words = (job["vocab_size"] or 2) - 2
    if abs(words - 793_471) < 10:
        words = 800_000
    return PAPER_S2_RATIOS.get((job["kind"], words))


def table_rows(
    jobs: List[Dict[str, Any]], results: List[Dict[str, Any]], clock: str = "wall"
) -> List[Dict[str, Any]]:
    """
    One row per job: its figures (times on `clock`, "wall" or "cpu") and each figure's ratio to
    Cont's, measured in the same run; `paper_s2_ratio` where the paper's Table 4 has the row.
    """

    def figures(result: Dict[str, Any]) -> Dict[str, Any]:
        flat = {key: result.get(key) for key in ("params", "batch", "mem")}
        for key in ("s1", "s2", "words_per_second", "output_share"):
            value = result.get(key)
            flat[key] = value[clock] if isinstance(value, dict) else value
        return flat

    reference = next(
        (
            figures(result)
            for job, result in zip(jobs, results)
            if job["kind"] == "cont" and "error" not in result
        ),
        {},
    )
    rows = []
    for job, result in zip(jobs, results):
        row: Dict[str, Any] = {
            "kind": job["kind"],
            "label": LABELS[job["kind"]],
            "vocab": _vocab_label(job["vocab_size"], job["kind"]),
            "paper_s2_ratio": _paper_ratio(job),
        }
        if "error" in result:
            row["error"] = result["error"]
        else:
            row.update(figures(result))
            row["ratios"] = {
                key: _ratio(row[key], reference.get(key))
                for key in ("params", "batch", "mem", "s1", "s2", "words_per_second")
            }
        rows.append(row)
    return rows


def _with_ratio(text: str, ratio: Optional[float]) -> str:
    return f"{text} ({'-' if ratio is None else f'{ratio:.2f}x'})"


def format_table(
    jobs: List[Dict[str, Any]], results: List[Dict[str, Any]], sizes, clock: str = "wall"
) -> str:
    """The rows of `table_rows` as Markdown, and the whole-model comparison ELMo-C vs ELMo."""
    rows = [
        "| Output layer | Vocab | Params | Batch | S1 (s) | S2 (s) "
        f"| Mem@{sizes['memory_batch']} | Out% | S2 paper |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    table = table_rows(jobs, results, clock)
    for row in table:
        if "error" in row:
            rows.append(f"| {row['label']} | {row['vocab']} | failed: {row['error']} | | | | | | |")
            continue
        ratios = row["ratios"]
        cells = [
            row["label"],
            row["vocab"],
            _with_ratio(_millions(row["params"]), ratios["params"]),
            _with_ratio(str(row["batch"]), ratios["batch"]) if row["batch"] else "does not fit",
            _with_ratio(f"{row['s1']:.3f}", ratios["s1"]),
            _with_ratio(f"{row['s2']:.1f}", ratios["s2"]) if row["s2"] is not None else "-",
            _with_ratio(f"{row['mem'] / 1024 ** 2:.0f} MB", ratios["mem"]) if row["mem"] else "-",
            f"{100 * row['output_share']:.0f}%",
            f"{row['paper_s2_ratio']:.2f}x" if row["paper_s2_ratio"] else "",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    whole = [
        row for row in table if row["kind"] in ("cont", "elmo") and row.get("words_per_second")
    ]
    if len(whole) == 2:
        rows += [
            "",
            "Whole models, same encoder: ELMo-C (fastText input, continuous output) vs ELMo "
            "(character-CNN input, sampled softmax):",
            "",
            f"| Model | Params | Words/s at its largest batch ({clock} time) | Mem@{sizes['memory_batch']} |",
            "|---|---|---|---|",
        ]
        for row in whole:
            name = "ELMo-C" if row["kind"] == "cont" else f"ELMo ({row['vocab']})"
            memory = (
                _with_ratio(f"{row['mem'] / 1024 ** 2:.0f} MB", row["ratios"]["mem"])
                if row["mem"]
                else "-"
            )
            speed = _with_ratio(f"{row['words_per_second']:.0f}", row["ratios"]["words_per_second"])
            rows.append(f"| {name} | {_millions(row['params'])} | {speed} | {memory} |")
    return "\n".join(rows)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paper-sizes", action="store_true", help="the paper's sizes (use a GPU)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--only", nargs="*", choices=sorted(LABELS), help="run only these layers")
    parser.add_argument("--cell-dim", type=int)
    parser.add_argument("--projection-dim", type=int)
    parser.add_argument("--embedding-dim", type=int)
    parser.add_argument("--vocab-sizes", type=int, nargs="+")
    parser.add_argument("--seq-len", type=int, help="words per sentence")
    parser.add_argument("--tokens", type=int, help="words trained on for S2")
    parser.add_argument("--budget-gb", type=float, help="memory budget for the largest batch")
    parser.add_argument("--max-batch", type=int, help="largest batch tried (sentences)")
    parser.add_argument(
        "--memory-batch", type=int, help="batch at which Mem and Out%% are measured"
    )
    parser.add_argument("--subword-vocab", type=int)
    parser.add_argument(
        "--subword-ratio",
        type=float,
        default=1.15,
        help="BPE pieces per word (sequence length of the subword LM)",
    )
    parser.add_argument("--fasttext-words", type=int, default=100_000)
    parser.add_argument("--fasttext-bucket", type=int, default=200_000)
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed repeats of S1 and Out%% (the fastest is kept)"
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default=None,
        help="time the table reports (default: cpu on a CPU, wall on a GPU); "
        "both are in --output",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per layer")
    parser.add_argument("--output", type=Path, help="write all results as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the table and setup as Markdown here")
    parser.add_argument(
        "--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "elmoc_benchmark"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        result = run_worker(json.loads(args.worker))
        print(json.dumps(result), flush=True)
        return

    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.clock is None:
        args.clock = "wall" if args.device.startswith("cuda") else "cpu"
    sizes = dict(SIZES["paper" if args.paper_sizes else "default"])
    for key in (
        "cell_dim",
        "projection_dim",
        "embedding_dim",
        "vocab_sizes",
        "seq_len",
        "tokens",
        "budget_gb",
        "max_batch",
        "memory_batch",
        "subword_vocab",
    ):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    fasttext_path = random_fasttext(
        args.work_dir
        / f"synthetic-{args.fasttext_words}-{args.fasttext_bucket}-{sizes['embedding_dim']}d.bin",
        args.fasttext_words,
        args.fasttext_bucket,
        sizes["embedding_dim"],
        scale=0.1,
    )
    jobs = make_jobs(args, sizes, fasttext_path)
    machine = machine_description(args.device)
    print(f"Machine: {machine}", flush=True)
    print(f"Sizes: {json.dumps(sizes)}", flush=True)
    load_before = os.getloadavg()
    started = time.perf_counter()
    results = []
    for job in jobs:
        label = f"{LABELS[job['kind']]} {_vocab_label(job['vocab_size'], job['kind'])}"
        print(f"-- {label} ...", end=" ", flush=True)
        try:
            result = run_job(job, args.timeout)
        except subprocess.TimeoutExpired:
            result = {"error": f"timeout after {args.timeout:.0f}s"}
        results.append(result)
        print(
            f"{result.get('wall', 0):.0f}s" if "error" not in result else result["error"],
            flush=True,
        )
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()
    table = format_table(jobs, results, sizes, args.clock)
    sources = {json.dumps(r.get("sources"), sort_keys=True) for r in results if "sources" in r}
    if len(sources) > 1:
        table += (
            "\n\nWARNING: the code under test changed while the benchmark ran (source hashes "
            "differ between layers); rerun it."
        )
    command = "python -m benchmarks.output_layers " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    notes = (
        f"Command: `{command.strip()}` ({elapsed / 60:.1f} min). Machine: {machine}. "
        f"Load average before/after: {load_before[0]:.1f}/{load_after[0]:.1f}.\n"
        f"Encoder 2 x {sizes['cell_dim']} -> {sizes['projection_dim']} LayerNorm LSTM, "
        f"{sizes['embedding_dim']}-d synthetic fastText input, {sizes['seq_len']}-word sentences, "
        f"budget {sizes['budget_gb']:g} GB, S2 = {sizes['tokens']:,} words, "
        f"Mem/Out% at batch {sizes['memory_batch']}; device {args.device}; times are "
        + ("process CPU seconds (all threads)" if args.clock == "cpu" else "wall-clock seconds")
        + f", S1 and Out% the fastest of {args.repeats}."
    )
    print()
    print(table)
    print()
    print(notes)
    if args.output:
        args.output.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "sizes": sizes,
                    "jobs": jobs,
                    "results": results,
                    "notes": notes,
                },
                indent=2,
            )
        )
    if args.markdown:
        args.markdown.write_text(table + "\n\n" + notes + "\n")


if __name__ == "__main__":
    main()
