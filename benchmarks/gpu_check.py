#!/usr/bin/env python
"""
The GPU check (issue #37): everything a first GPU session should measure, in one command that
ends within `--budget-minutes` (default 8) and writes `results.json` and `results.md` into `--out`.

    python -m benchmarks.gpu_check --out "$OUT"              # on a CUDA machine
    python -m benchmarks.gpu_check --out /tmp/check --dry-run  # any machine: tiny sizes, CPU

Sections (each in its own try/except: one that fails or is skipped records why, the others still
report; `results.json` is rewritten after every section, so a run stopped from outside keeps what
it finished):

1. `environment`: Python, torch, CUDA, cuDNN, the GPU, and whether allennlp imports (the device
   image may have torch but not allennlp; every section below that needs it says so).
2. `cuda_tests`: `pytest tests/gpu/test_cuda.py` in a subprocess; passed / failed / skipped per test.
3. `recurrence`: the fast recurrence (`implementation="auto"`) against the reference, forward
   and backward, in float32 and under autocast bf16 and fp16; largest differences relative to
   the largest value, against dtype-fit tolerances.
4. `amp_step`: training steps of the paper-size ELMo-C (2 x 4096 -> 512, 300-d fastText,
   continuous output; `training_configs/pretrain/baselines.libsonnet`) at float32, bfloat16 as
   `trainer.precision` bfloat16 runs it (`elmoc_allennlp.training.mixed_precision`'s
   `training_autocast_dtype` and `autocast`) and fp16 autocast (with a gradient scaler), from the
   same weights on the same batch: finite loss and gradients, each loss's relative difference to
   float32's, and seconds per step (after a warm-up step) with the speed-up over float32.
5. `host_syncs`: the synchronizations of one training step (forward, backward, Adam) counted by
   `torch.cuda.set_sync_debug_mode("warn")`, with their source lines.
6. `table4`: the paper's Table 4 on this device with `benchmarks/output_layers.py`'s workers:
   words/s and peak memory of ELMo-C, ELMo (char-CNN + sampled softmax, 793K words), ELMo-A
   (adaptive, 793K), Subword and Fixed at the paper's sizes, each at its largest batch within
   the paper's 12 GB, as ratios to ELMo-C next to the paper's.
7. `encoder`: `benchmarks/encoder_speed.py`'s methods against cuDNN `nn.LSTM(proj_size)` at the
   three shapes of `README_encoder.md`, and the fast path with `torch.compile` on the step loop
   (recorded as not ready where it fails: an option, not a promise).
8. `embed`: whole `allennlp elmoc-embed` commands, ELMo-C against ELMo (sentences/s, model
   loading included), each biLM archived by `allennlp train` on one synthetic batch.

With `--dry-run` the same code runs at tiny sizes on the CPU in well under a minute (the test
suite runs it); what needs CUDA (fp16 autocast, the sync counter, cuDNN) is recorded as skipped
with the reason (`amp_step`'s bfloat16 runs there with `ELMOC_EMULATE_BFLOAT16`: its numerics, no
speed-up to read). Needs only torch at import: allennlp is imported inside the sections that use
it.
"""

import argparse
import contextlib
import json
import linecache
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_JSON, RESULTS_MD = "results.json", "results.md"
FORMAT_VERSION = 1
SECTIONS = [
    "environment",
    "cuda_tests",
    "recurrence",
    "amp_step",
    "host_syncs",
    "table4",
    "encoder",
    "embed",
]
STATUSES = ("ok", "failed", "skipped")
# Seconds each section may take on an H100 (the sum stays under 8 minutes); a section is skipped
# when fewer seconds than its share are left, so that later ones still run.
SECONDS = {
    "environment": 10,
    "cuda_tests": 90,
    "recurrence": 25,
    "amp_step": 35,
    "host_syncs": 15,
    "table4": 200,
    "encoder": 60,
    "embed": 45,
}
# Paper, Table 4: time to train relative to Cont (ELMo-C) at the 800K vocabulary; the abstract
# and section 5.2 give 4.2x for ELMo and 2.28x for ELMo-A (README.md's first paragraph).
PAPER_TIME_RATIOS = {"elmo": 4.2, "adaptive": 1.47, "subword": 1.53, "fixed": 1.24}
# Relative tolerances of fast vs reference (largest difference / largest value).
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 1e-2}
ENCODER_SHAPES = ["medium", "quickstart", "paper"]  # README_encoder.md's three tables


class Skip(Exception):
    """A section that cannot run here; the message says why."""


# ============================================================================ the sections


def needs_allennlp() -> None:
    try:
        import allennlp  # noqa: F401
        import elmoc_allennlp  # noqa: F401
    except Exception as error:  # ImportError, or a broken dependency of allennlp
        raise Skip(
            f"allennlp or the plugin does not import here ({type(error).__name__}: {error}); "
            "carry the wheels listed in benchmarks/README.md (GPU check)"
        )


def needs_cuda(ctx: "Context", what: str) -> None:
    if ctx.device.type != "cuda":
        raise Skip(f"{what} needs CUDA (this run: {ctx.device.type})")


def environment(ctx: "Context") -> Dict[str, Any]:
    result: Dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(ctx.device),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
    if ctx.device.type == "cuda":
        properties = torch.cuda.get_device_properties(ctx.device)
        result.update(
            gpu=properties.name,
            gpu_memory_gib=round(properties.total_memory / 2**30, 1),
            multiprocessors=properties.multi_processor_count,
            cudnn=torch.backends.cudnn.version(),
            bf16=torch.cuda.is_bf16_supported(),
        )
    try:
        import allennlp.version

        result["allennlp"] = allennlp.version.VERSION
    except Exception as error:
        result["allennlp"] = None
        result["allennlp_error"] = f"{type(error).__name__}: {error}"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    result["commit"] = commit.stdout.strip() or None
    return result


def cuda_tests(ctx: "Context") -> Dict[str, Any]:
    needs_allennlp()
    report = ctx.work / "cuda_tests.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        "tests/gpu/test_cuda.py",
        f"--junitxml={report}",
    ]
    completed = subprocess.run(
        command,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=ctx.seconds_for("cuda_tests"),
        env=ctx.subprocess_environment(),
    )
    tests = []
    if report.exists():
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = {"failure": "failed", "error": "failed"}.get(child.tag, "skipped")
                    message = (child.get("message") or child.text or "")[:500]
            tests.append(
                {
                    "name": case.get("name"),
                    "outcome": outcome,
                    "seconds": float(case.get("time") or 0),
                    "message": message,
                }
            )
    counts = {
        outcome: sum(test["outcome"] == outcome for test in tests)
        for outcome in ("passed", "failed", "skipped")
    }
    result = {"exit_code": completed.returncode, "counts": counts, "tests": tests}
    if completed.returncode not in (0, 5) or counts["failed"]:
        result["output_tail"] = completed.stdout[-2000:] + completed.stderr[-1000:]
        raise SectionFailed(f"{counts['failed']} failed (exit code {completed.returncode})", result)
    return result


class SectionFailed(Exception):
    """A section that ran and found a problem: its results are kept with the failure."""

    def __init__(self, message: str, results: Dict[str, Any]) -> None:
        super().__init__(message)
        self.results = results


def _relative_difference(fast: torch.Tensor, reference: torch.Tensor) -> float:
    fast, reference = fast.detach().float(), reference.detach().float()
    scale = reference.abs().max().clamp_min(1e-12)
    return float((fast - reference).abs().max() / scale)


def recurrence(ctx: "Context") -> Dict[str, Any]:
    needs_allennlp()
    from elmoc_allennlp.common.torch_versions import TORCH_VERSION
    from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import LayerNormLstm

    B, T, P, C = (4, 6, 8, 16) if ctx.dry_run else (16, 20, 512, 4096)
    torch.manual_seed(0)
    encoder = LayerNormLstm(P, P, C, num_layers=2, recurrent_dropout=0.0).to(ctx.device).train()
    inputs = torch.randn(B, T, P, device=ctx.device)
    mask = torch.ones(B, T, dtype=torch.bool, device=ctx.device)
    mask[1, T // 2 :] = False
    mask[-1, 2:] = False

    def run(implementation: str, dtype: str):
        encoder.implementation = implementation
        encoder.zero_grad()
        leaf = inputs.clone().requires_grad_(True)
        autocast = (
            torch.autocast(ctx.device.type, dtype=getattr(torch, dtype))
            if dtype != "float32"
            else contextlib.nullcontext()
        )
        with autocast:
            output = encoder(leaf, mask)
        (
            output.float() * torch.linspace(-1, 1, output.size(-1), device=ctx.device)
        ).sum().backward()
        return [output.detach()] + [leaf.grad] + [p.grad.clone() for p in encoder.parameters()]

    def difference(first, second) -> Dict[str, float]:
        return {
            "output": _relative_difference(first[0], second[0]),
            "gradients": max(_relative_difference(a, b) for a, b in zip(first[1:], second[1:])),
        }

    exact = run("reference", "float32")
    results, failures = {}, []
    for dtype in ("float32", "bfloat16", "float16"):
        if dtype == "float16" and ctx.device.type != "cuda":
            results[dtype] = {
                "status": "skipped",
                "reason": "fp16 autocast is measured on CUDA only",
            }
            continue
        if dtype == "bfloat16" and ctx.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            results[dtype] = {"status": "skipped", "reason": "no bf16 on this GPU"}
            continue
        if dtype == "bfloat16" and ctx.device.type == "cpu" and TORCH_VERSION < (2, 0):
            # Seen with torch 1.12: "expected scalar type BFloat16 but found Float" in the backward.
            results[dtype] = {
                "status": "skipped",
                "reason": f"torch {torch.__version__}'s CPU autocast cannot "
                "run the reference recurrence's backward in bf16",
            }
            continue
        fast, reference = run("auto", dtype), run("reference", dtype)
        row: Dict[str, Any] = {
            "fast_vs_reference": difference(fast, reference),
            "tolerance": TOLERANCE[dtype],
            "finite": all(bool(torch.isfinite(t).all()) for t in fast),
        }
        if dtype == "float32":
            ok = max(row["fast_vs_reference"].values()) <= TOLERANCE[dtype]
        else:
            # Under autocast both paths round; the fast one must be as close to float32 as the reference.
            row["fast_vs_float32"] = difference(fast, exact)
            row["reference_vs_float32"] = difference(reference, exact)
            ok = all(
                row["fast_vs_float32"][key]
                <= max(2 * row["reference_vs_float32"][key], TOLERANCE[dtype])
                for key in ("output", "gradients")
            )
        row["status"] = "ok" if ok and row["finite"] else "failed"
        results[dtype] = row
        if row["status"] == "failed":
            failures.append(dtype)
    result = {
        "shape": {"batch": B, "timesteps": T, "projection": P, "cell": C, "layers": 2},
        "dtypes": results,
    }
    if failures:
        raise SectionFailed(f"fast != reference beyond tolerance in {', '.join(failures)}", result)
    return result


def _paper_job(ctx: "Context", kind: str, vocab_size: Optional[int]) -> Dict[str, Any]:
    """A `benchmarks/output_layers.py` job at the paper's sizes (tiny ones in a dry run)."""
    from benchmarks import output_layers

    sizes = dict(output_layers.SIZES["paper"])
    argv = [
        "--device",
        str(ctx.device),
        "--repeats",
        "1" if ctx.dry_run else "2",
        "--fasttext-words",
        str(ctx.fasttext_words),
        "--fasttext-bucket",
        str(ctx.fasttext_bucket),
    ]
    if ctx.dry_run:
        sizes.update(
            cell_dim=16,
            projection_dim=8,
            embedding_dim=ctx.fasttext_dim,
            vocab_sizes=[9000],
            seq_len=6,
            tokens=48,
            budget_gb=1.0,
            max_batch=8,
            memory_batch=8,
            subword_vocab=300,
            char_cnn_highway=1,
        )
    args = output_layers.parse_args(argv)
    jobs = output_layers.make_jobs(args, sizes, ctx.fasttext_path())
    if ctx.dry_run:
        jobs = [dict(job, char_cnn_filters=[[1, 4], [2, 4]]) for job in jobs]
    middle = sizes["vocab_sizes"][len(sizes["vocab_sizes"]) // 2]
    wanted = None if kind in ("cont", "subword") else middle + 2
    return next(
        job
        for job in jobs
        if job["kind"] == kind and (wanted is None or job["vocab_size"] == wanted)
    )


def _gradient_report(model) -> Dict[str, Any]:
    grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
    finite = all(
        bool(torch.isfinite(g.coalesce().values() if g.is_sparse else g).all()) for g in grads
    )
    return {"parameters_with_gradient": len(grads), "gradients_finite": finite}


@contextlib.contextmanager
def _environment(name: str, value: Optional[str]):
    """`os.environ[name]` set to `value` (or left as it is for `None`) inside the block."""
    saved = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def amp_step(ctx: "Context") -> Dict[str, Any]:
    """
    Training steps of the paper-size ELMo-C at float32, bfloat16 (as `trainer.precision` bfloat16
    runs it: `training_autocast_dtype` and `autocast` of `elmoc_allennlp.training.mixed_precision`)
    and float16 (autocast with a gradient scaler, CUDA only), each from the same initial weights on
    the same batch: the first step's loss (the same dropout masks) and its relative difference to
    float32's, finite gradients, and seconds per step (the least of `repeats` steps after that
    first one, the warm-up).
    """
    needs_allennlp()
    from benchmarks import output_layers
    from elmoc_allennlp.common.precision import EMULATE_BFLOAT16, native_bfloat16
    from elmoc_allennlp.training.mixed_precision import autocast, training_autocast_dtype

    job = _paper_job(ctx, "cont", None)
    torch.manual_seed(0)
    model = output_layers.build_model(job).to(ctx.device).train()
    initial = {name: value.detach().clone() for name, value in model.state_dict().items()}
    batch = output_layers.BatchMaker(job).make(2 if ctx.dry_run else 32, ctx.device)
    repeats = 1 if ctx.dry_run else 3
    results: Dict[str, Any] = {
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "batch_sentences": 2 if ctx.dry_run else 32,
        "timed_steps": repeats,
    }
    failures: List[str] = []

    def run(precision: str, dtype: Optional[torch.dtype]) -> Dict[str, Any]:
        model.load_state_dict(initial)
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        # fp16 needs loss scaling; torch 1.12 has the scaler under torch.cuda.amp only.
        scaler = torch.cuda.amp.GradScaler() if precision == "float16" else None

        def step() -> Dict[str, Any]:
            model.zero_grad(set_to_none=True)
            context = (
                autocast(ctx.device, dtype)
                if scaler is None
                else torch.autocast(ctx.device.type, dtype=torch.float16)
            )
            with context:
                loss = model(tokens=batch)["loss"]
            if scaler is None:
                loss.backward()
                report = _gradient_report(model)
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                report = _gradient_report(model)
                scaler.step(optimizer)
                scaler.update()
            return dict(report, loss=float(loss))

        def timed() -> float:
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            step()
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - started

        torch.manual_seed(1)  # the same dropout masks in every precision's first step
        first = step()  # warm-up, at the initial weights: the loss compared
        seconds = min(timed() for _ in range(repeats))
        ok = (
            torch.isfinite(torch.tensor(first["loss"])).item()
            and first["gradients_finite"]
            and first["parameters_with_gradient"] > 0
        )
        return dict(first, status="ok" if ok else "failed", seconds_per_step=round(seconds, 4))

    results["float32"] = run("float32", None)
    reference = results["float32"]
    # A dry run on a CPU without native bfloat16: the trainer's path with its emulation switch
    # (bfloat16's numerics, not its speed), so that the autocast path runs there too.
    emulate = "1" if ctx.dry_run and not native_bfloat16(ctx.device)[0] else None
    with _environment(EMULATE_BFLOAT16, emulate):
        bfloat16 = training_autocast_dtype("bfloat16", ctx.device, use_amp=False)
    for precision, dtype in (("bfloat16", bfloat16), ("float16", torch.float16)):
        if precision == "float16" and ctx.device.type != "cuda":
            results[precision] = {
                "status": "skipped",
                "reason": "fp16 autocast with a gradient scaler is CUDA only",
            }
            continue
        if dtype is None:
            results[precision] = {
                "status": "skipped",
                "reason": f"trainer.precision bfloat16 runs float32 on {ctx.device} (no native "
                "bfloat16)",
            }
            continue
        with _environment(EMULATE_BFLOAT16, emulate if precision == "bfloat16" else None):
            row = run(precision, dtype)
        row["loss_relative_difference_to_float32"] = abs(row["loss"] - reference["loss"]) / max(
            abs(reference["loss"]), 1e-30
        )
        row["speedup_over_float32"] = round(
            reference["seconds_per_step"] / max(row["seconds_per_step"], 1e-9), 3
        )
        if emulate is not None and precision == "bfloat16":
            # Emulated: its time is no figure of bfloat16's.
            row["speedup_over_float32"] = None
            row["emulated"] = f"{EMULATE_BFLOAT16}: bfloat16's numerics, not its speed"
        results[precision] = row
    for precision in ("float32", "bfloat16", "float16"):
        if results[precision]["status"] == "failed":
            failures.append(precision)
    if failures:
        raise SectionFailed(f"non-finite loss or gradients under {', '.join(failures)}", results)
    return results


def _to(tensors, device):
    if isinstance(tensors, dict):
        return {key: _to(value, device) for key, value in tensors.items()}
    return tensors.to(device)


def host_syncs(ctx: "Context") -> Dict[str, Any]:
    needs_allennlp()
    from tests.conftest import FIXTURES_ROOT
    from tests.models.bidirectional_language_model.test_no_host_syncs import (
        _model_and_batch,
    )  # the fixture biLM, gathered vectors

    # The fixture config's data: its folder, and a 16-d fastText .bin (the suite trains one; here a
    # synthetic one: no fastText package needed).
    os.environ.setdefault("ELMOC_TEST_FIXTURES", str(FIXTURES_ROOT))
    os.environ.setdefault("ELMOC_TEST_FASTTEXT", str(ctx.fasttext_path(16)))
    model, tensors = _model_and_batch(gather=True)
    model.to(ctx.device).train()
    tensors = _to(tensors, ctx.device)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)

    def step() -> None:
        optimizer.zero_grad()
        model(**tensors)["loss"].backward()
        optimizer.step()

    step()  # warm-up: the optimizer's state
    if ctx.device.type != "cuda":
        return {
            "step": "ran",
            "synchronizations": None,
            "note": "counted on CUDA only (torch.cuda.set_sync_debug_mode)",
        }
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    sites: Dict[str, int] = {}
    for warning in caught:
        if "synchroniz" in str(warning.message):
            line = linecache.getline(warning.filename, warning.lineno).strip()
            site = f"{Path(warning.filename).name}:{warning.lineno}: {line}"
            sites[site] = sites.get(site, 0) + 1
    return {"synchronizations": sum(sites.values()), "sites": sites}


def table4(ctx: "Context") -> Dict[str, Any]:
    needs_allennlp()
    from benchmarks import output_layers

    rows = [
        ("cont", "ELMo-C"),
        ("elmo", "ELMo"),
        ("adaptive", "ELMo-A"),
        ("subword", "Subword"),
        ("fixed", "Fixed"),
    ]
    results: Dict[str, Any] = {}
    deadline = time.monotonic() + ctx.seconds_for("table4")
    for kind, label in rows:
        left = deadline - time.monotonic()
        if left < 15:
            results[label] = {"error": "skipped: the section's time was used up"}
            continue
        job = _paper_job(ctx, kind, None)
        job["budget_gb"] = 1.0 if ctx.dry_run else 12.0  # the paper's 12 GB GPU
        try:
            if (
                ctx.dry_run
            ):  # the worker's own code, in this process (a subprocess each costs seconds)
                results[label] = output_layers.run_worker(job)
            else:  # one process per model, as output_layers.py runs them: independent peak memory
                results[label] = output_layers.run_job(
                    job, timeout=left, environment=ctx.subprocess_environment()
                )
        except subprocess.TimeoutExpired:
            results[label] = {"error": f"timeout after {left:.0f}s"}
        results[label]["vocab_size"] = job["vocab_size"]
    reference = results.get("ELMo-C", {})
    table = []
    for kind, label in rows:
        result = results[label]
        row: Dict[str, Any] = {"model": label, "paper_time_ratio": PAPER_TIME_RATIOS.get(kind)}
        if "error" in result:
            row["error"] = result["error"]
        else:
            words = result.get("words_per_second", {}).get("wall")
            row.update(
                params=result["params"],
                batch=result["batch"],
                words_per_second=words,
                peak_memory_mib=None if result.get("mem") is None else result["mem"] / 2**20,
            )
            reference_words = reference.get("words_per_second", {}).get("wall")
            row["time_ratio_to_elmoc"] = (
                reference_words / words if words and reference_words else None
            )
            row["memory_ratio_to_elmoc"] = (
                result["mem"] / reference["mem"]
                if result.get("mem") and reference.get("mem")
                else None
            )
        table.append(row)
    result = {"budget_gb": 1.0 if ctx.dry_run else 12.0, "rows": table, "raw": results}
    failed = [row["model"] for row in table if "error" in row]
    if failed:
        raise SectionFailed(f"no figures for {', '.join(failed)}", result)
    return result


ENCODER_SHAPE_SIZES = (
    {  # (batch, timesteps, projection, cell), as benchmarks/encoder_speed.py's SHAPES
        "medium": (32, 20, 512, 2048),
        "quickstart": (64, 25, 256, 1024),
        "paper": (16, 20, 512, 4096),
    }
)


def _cudnn_only(ctx: "Context", rounds: int) -> Dict[str, Any]:
    """Without allennlp: the torch-only baseline, `nn.LSTM(proj_size)` forward + backward, ms per call."""
    sizes = {"tiny": (3, 4, 6, 8)} if ctx.dry_run else ENCODER_SHAPE_SIZES
    rows = {}
    for name, (B, T, P, C) in sizes.items():
        lstm = torch.nn.LSTM(P, C, proj_size=P, batch_first=True, bidirectional=True).to(ctx.device)
        inputs = torch.randn(B, T, P, device=ctx.device, requires_grad=True)
        times = []
        for index in range(rounds + 1):
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            lstm(inputs)[0].sum().backward()
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            if index:  # the first call is the warm-up
                times.append(time.perf_counter() - started)
        median = statistics.median(times)
        rows[name] = {"ms": median * 1e3, "tokens_per_second": 2 * B * T / median}
    return rows


def encoder(ctx: "Context") -> Dict[str, Any]:
    rounds = 1 if ctx.dry_run else 5
    try:
        needs_allennlp()
    except Skip as skip:
        raise SectionFailed(
            f"only the torch baseline nn.LSTM(proj_size) ran: {skip}",
            {"nn_lstm_only": _cudnn_only(ctx, rounds)},
        )
    from benchmarks import encoder_speed  # imports allennlp (its LstmCellWithProjection row)

    shapes = (
        [encoder_speed.Shape("tiny (B3 T4 P6 C8)", 3, 4, 6, 8)]
        if ctx.dry_run
        else [encoder_speed.SHAPES[name] for name in ENCODER_SHAPES]
    )
    gflops = encoder_speed.matmul_gflops(ctx.device)
    tables = {
        shape.name: encoder_speed.measure_rows(shape, rounds, gflops, ctx.device)
        for shape in shapes
    }
    result: Dict[str, Any] = {"matmul_gflops": gflops, "rounds": rounds, "shapes": tables}
    result["compiled"] = _compiled_step(ctx, shapes[-1], encoder_speed)
    return result


def _compiled_step(ctx: "Context", shape, encoder_speed) -> Dict[str, Any]:
    """The fast path with `torch.compile` on the whole layer call: ratio to the eager fast path."""
    if not hasattr(torch, "compile"):
        return {"status": "skipped", "reason": f"torch {torch.__version__} has no torch.compile"}
    if ctx.dry_run:
        return {
            "status": "skipped",
            "reason": "compiles on CUDA runs only (a compiler run takes minutes on CPU)",
        }
    from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import LayerNormLstm

    B, T, P, C = shape.batch, shape.timesteps, shape.projection, shape.cell
    layer = LayerNormLstm(P, P, C, num_layers=1, recurrent_dropout=0.1).to(ctx.device).train()
    inputs = torch.randn(B, T, P, device=ctx.device, requires_grad=True)
    mask = torch.ones(B, T, dtype=torch.bool, device=ctx.device)
    try:
        compiled = torch.compile(layer)
        timings = {}
        for name, module in (("eager", layer), ("compiled", compiled)):
            for _ in range(2):
                module(inputs, mask).sum().backward()
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(5):
                module(inputs, mask).sum().backward()
            torch.cuda.synchronize()
            timings[name] = (time.perf_counter() - started) / 5
        return {
            "status": "ok",
            "ms": {k: v * 1e3 for k, v in timings.items()},
            "speedup": timings["eager"] / timings["compiled"],
        }
    except Exception as error:  # an option, not a promise: record why it is not ready
        return {"status": "failed", "reason": f"{type(error).__name__}: {str(error)[:500]}"}


def embed(ctx: "Context") -> Dict[str, Any]:
    needs_allennlp()
    from benchmarks.common import zipf_corpus

    corpus = zipf_corpus(
        ctx.work / "embed_corpus",
        64 if ctx.dry_run else 6000,
        1,
        vocabulary_size=ctx.fasttext_words - 1,
    )[0]
    sentences = 16 if ctx.dry_run else 2000
    text = ctx.work / "embed_sentences.txt"
    text.write_text("\n".join(corpus.read_text().splitlines()[:sentences]) + "\n")
    pretrain = REPO_ROOT / "training_configs" / "pretrain"
    models = {  # label -> (config, ELMOC_BASELINE)
        "ELMo-C": (pretrain / ("elmoc_small.jsonnet" if ctx.dry_run else "elmoc.jsonnet"), ""),
        "ELMo": (pretrain / ("baselines_small.jsonnet" if ctx.dry_run else "elmo.jsonnet"), "elmo"),
    }
    cuda = 0 if ctx.device.type == "cuda" else -1
    environment = ctx.subprocess_environment(
        # the configs' fastText sizes; validation is switched off below
        ELMOC_FASTTEXT=str(ctx.fasttext_path(100 if ctx.dry_run else 300)),
        ELMOC_TRAIN_DATA=str(corpus),
        ELMOC_VALIDATION_DATA=str(corpus),
        ELMOC_ELMO_ARCHIVE="",
    )
    archives = {}
    for label, (config, baseline) in models.items():
        run = ctx.work / f"embed_{baseline or 'elmoc'}"
        overrides = {
            "trainer.num_epochs": 1,
            "trainer.cuda_device": cuda,
            "data_loader.batches_per_epoch": 1,
            "validation_data_path": None,
        }
        if baseline and ctx.dry_run:  # a corpus of a few hundred words; a toy character CNN
            overrides["model.output_layer.num_samples"] = 64
            overrides[
                "model.text_field_embedder.token_embedders.elmo_characters.encoder.filters"
            ] = [[1, 4], [2, 4]]
        ctx.allennlp(
            [
                "train",
                str(config),
                "-s",
                str(run),
                "--include-package",
                "elmoc_allennlp",
                "-o",
                json.dumps(overrides),
            ],
            run.with_suffix(".log"),
            dict(environment, ELMOC_BASELINE=baseline),
        )
        archives[label] = run / "model.tar.gz"
    seconds: Dict[str, List[float]] = {label: [] for label in archives}
    for _ in range(1 if ctx.dry_run else 2):  # alternating, side by side; the median
        for label, archive in archives.items():
            output = ctx.work / f"embed_{label}.hdf5"
            started = time.perf_counter()
            ctx.allennlp(
                [
                    "elmoc-embed",
                    str(archive),
                    str(text),
                    str(output),
                    "--all",
                    "--force",
                    "--cuda-device",
                    str(cuda),
                    "--include-package",
                    "elmoc_allennlp",
                ],
                output.with_suffix(".log"),
                environment,
            )
            seconds[label].append(time.perf_counter() - started)
    per_second = {label: sentences / statistics.median(times) for label, times in seconds.items()}
    return {
        "sentences": sentences,
        "sentences_per_second": per_second,
        "ratio_elmoc_to_elmo": per_second["ELMo-C"] / per_second["ELMo"],
        "note": "whole commands (model loading included), trained on one synthetic batch",
    }


# ============================================================================ the runner


class Context:
    def __init__(self, args) -> None:
        self.args = args
        self.dry_run = args.dry_run
        self.device = torch.device(args.device)
        self.out = args.out
        self.work = Path(tempfile.mkdtemp(prefix="elmoc_gpu_check_", dir=args.work_dir))
        self.started = time.monotonic()
        self.budget = args.budget_minutes * 60
        self.fasttext_words = 500 if self.dry_run else 100_000
        self.fasttext_bucket = 1000 if self.dry_run else 200_000
        self.fasttext_dim = 10 if self.dry_run else 300

    def fasttext_path(self, dim: Optional[int] = None) -> Path:
        """A synthetic fastText `.bin` of `dim` dimensions (written once, by the library's public writer)."""
        from benchmarks.common import random_fasttext

        dim = dim or self.fasttext_dim
        return random_fasttext(
            self.work / f"synthetic_{dim}d.bin",
            self.fasttext_words,
            self.fasttext_bucket,
            dim,
            scale=0.1,
        )

    def seconds_left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def seconds_for(self, section: str) -> float:
        """A section's share, at most what is left after the shares of the sections still to run."""
        later = SECTIONS[SECTIONS.index(section) + 1 :]
        reserved = sum(SECONDS[name] for name in later if name in self.args.sections)
        return max(
            10.0,
            min(self.seconds_left() - reserved, SECONDS[section] * (3 if self.dry_run else 1.5)),
        )

    def subprocess_environment(self, **extra: str) -> Dict[str, str]:
        path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        return dict(
            os.environ, PYTHONPATH=path, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", **extra
        )

    def allennlp(self, arguments: List[str], log: Path, environment: Dict[str, str]) -> None:
        """
        `allennlp ARGUMENTS` as a command, its output in `log`. A dry run calls the same command
        function in this process (a process start with its imports costs seconds on a small CPU),
        restoring the environment, `sys.argv` and the root logger's handlers afterwards.
        """
        if not self.dry_run:
            from benchmarks.common import run_logged

            run_logged(
                [sys.executable, "-m", "allennlp"] + arguments,
                log,
                environment,
                cwd=REPO_ROOT,
                timeout=max(10.0, self.seconds_left()),
            )
            return
        import logging

        from allennlp.commands import main as allennlp_main

        saved_environment, saved_argv = dict(os.environ), sys.argv
        root = logging.getLogger()
        saved_handlers, saved_level = list(root.handlers), root.level
        os.environ.update(environment)
        sys.argv = ["allennlp"] + arguments
        try:
            allennlp_main(prog="allennlp")
        except SystemExit as exit:
            if exit.code:
                raise RuntimeError(f"allennlp {' '.join(arguments)} exited with {exit.code}")
        finally:
            os.environ.clear()
            os.environ.update(saved_environment)
            sys.argv = saved_argv
            for handler in root.handlers[:]:
                if handler not in saved_handlers:
                    root.removeHandler(handler)
                    handler.close()
            root.setLevel(saved_level)


FUNCTIONS: Dict[str, Callable[[Context], Dict[str, Any]]] = {
    "environment": environment,
    "cuda_tests": cuda_tests,
    "recurrence": recurrence,
    "amp_step": amp_step,
    "host_syncs": host_syncs,
    "table4": table4,
    "encoder": encoder,
    "embed": embed,
}


def run_section(ctx: Context, name: str) -> Dict[str, Any]:
    started = time.monotonic()
    record: Dict[str, Any]
    if ctx.seconds_left() < min(SECONDS[name], 20):
        record = {
            "status": "skipped",
            "reason": f"{ctx.seconds_left():.0f}s of the time budget left",
        }
    else:
        try:
            record = {"status": "ok", "results": FUNCTIONS[name](ctx)}
        except Skip as skip:
            record = {"status": "skipped", "reason": str(skip)}
        except SectionFailed as failure:
            record = {"status": "failed", "reason": str(failure), "results": failure.results}
        except BaseException as error:  # noqa: B902  (KeyboardInterrupt too: keep what we have)
            if isinstance(error, KeyboardInterrupt):
                raise
            record = {
                "status": "failed",
                "reason": f"{type(error).__name__}: {error}"[:1000],
                "traceback": traceback.format_exc()[-3000:],
            }
    record["seconds"] = round(time.monotonic() - started, 2)
    if ctx.device.type == "cuda":
        record["peak_gpu_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return record


def write_results(ctx: Context, sections: Dict[str, Dict[str, Any]], finished: bool) -> None:
    document = {
        "format": FORMAT_VERSION,
        "dry_run": ctx.dry_run,
        "device": str(ctx.device),
        "finished": finished,
        "seconds": round(time.monotonic() - ctx.started, 2),
        "budget_seconds": ctx.budget,
        "units": {
            "seconds": "s",
            "words_per_second": "words/s",
            "sentences_per_second": "sentences/s",
            "peak_memory_mib": "MiB",
            "peak_gpu_memory_mib": "MiB",
            "ms": "ms",
            "matmul_gflops": "GFLOP/s",
            "time_ratio_to_elmoc": "x (time to train / ELMo-C's)",
            "fast_vs_reference": "max|a-b| / max|b|",
        },
        "sections": sections,
    }
    ctx.out.mkdir(parents=True, exist_ok=True)
    (ctx.out / RESULTS_JSON).write_text(json.dumps(document, indent=1, default=str) + "\n")
    try:
        text = markdown(document)
    except Exception as error:  # the JSON above holds everything; say why the table is missing
        text = (
            f"# GPU check\n\nresults.md could not be rendered ({type(error).__name__}: {error}); "
            "see results.json.\n"
        )
    (ctx.out / RESULTS_MD).write_text(text)


def _number(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(document: Dict[str, Any]) -> str:
    sections = document["sections"]
    env = sections.get("environment", {}).get("results", {})
    lines = [
        f"# GPU check{' (dry run)' if document['dry_run'] else ''}",
        "",
        f"Device {document['device']}"
        + (f" ({env['gpu']}, {env.get('gpu_memory_gib')} GiB)" if env.get("gpu") else "")
        + f"; torch {env.get('torch')}, CUDA {env.get('cuda')}, allennlp {env.get('allennlp') or 'missing'}"
        + f"; commit {env.get('commit')}; {document['seconds']:.0f} s of {document['budget_seconds']:.0f} s"
        + ("" if document["finished"] else " (stopped before the end)")
        + ".",
        "",
        "| section | status | s | why / notes |",
        "|---|---|---:|---|",
    ]
    for name, record in sections.items():
        reason = " ".join(record.get("reason", "").split())[:300].replace("|", "/")
        lines.append(f"| {name} | {record['status']} | {record['seconds']:.1f} | {reason} |")
    table = sections.get("table4", {}).get("results")
    if table:
        lines += [
            "",
            f"## Table 4 on this device (largest batch within {table['budget_gb']:g} GB)",
            "",
            "| model | params | batch | words/s | peak MiB | time / ELMo-C's | paper | memory / ELMo-C's |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in table["rows"]:
            if "error" in row:
                lines.append(
                    f"| {row['model']} | {row['error']} | | | | | {_number(row['paper_time_ratio'])} | |"
                )
                continue
            lines.append(
                f"| {row['model']} | {row['params'] / 1e6:.1f}M | {_number(row['batch'])} | "
                f"{_number(row['words_per_second'], 0)} | {_number(row['peak_memory_mib'], 0)} | "
                f"{_number(row['time_ratio_to_elmoc'])} | {_number(row['paper_time_ratio'])} | "
                f"{_number(row['memory_ratio_to_elmoc'])} |"
            )
    recurrence_results = sections.get("recurrence", {}).get("results")
    if recurrence_results:
        lines += [
            "",
            "## Fast recurrence vs reference (max |a - b| / max |b|)",
            "",
            "| dtype | status | fast vs reference: output, gradients | fast vs float32 | reference vs float32 |",
            "|---|---|---|---|---|",
        ]

        def pair(value: Optional[Dict[str, float]]) -> str:
            return (
                "-" if not value else f"{_number(value['output'])}, {_number(value['gradients'])}"
            )

        for dtype, row in recurrence_results["dtypes"].items():
            lines.append(
                f"| {dtype} | {row['status']} {row.get('reason', '')} | {pair(row.get('fast_vs_reference'))} | "
                f"{pair(row.get('fast_vs_float32'))} | {pair(row.get('reference_vs_float32'))} |"
            )
    encoder_results = sections.get("encoder", {}).get("results") or {}
    for shape, row in encoder_results.get("nn_lstm_only", {}).items():
        lines.append(
            f"\nnn.LSTM(proj_size) alone, {shape}: {row['ms']:.1f} ms, {row['tokens_per_second']:,.0f} tokens/s"
        )
    if encoder_results.get("shapes"):
        for shape, rows in encoder_results["shapes"].items():
            lines += [
                "",
                f"## Encoder: {shape}",
                "",
                "| method | ms | tokens/s | ratio to nn.LSTM | peak MiB |",
                "|---|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {row['method']} | {row['ms']:.1f} | {row['tokens_per_second']:,.0f} | "
                f"{row['ratio_to_nn_lstm']:.2f} | {_number(row.get('peak_mib'), 0)} |"
                for row in rows
            ]
        lines.append(f"\ntorch.compile on the fast path: {json.dumps(encoder_results['compiled'])}")
    for name in ("cuda_tests", "amp_step", "host_syncs", "embed"):
        results = sections.get(name, {}).get("results")
        if results:
            shown = {
                key: value for key, value in results.items() if key not in ("tests", "output_tail")
            }
            lines += [
                "",
                f"## {name}",
                "",
                "```",
                json.dumps(shown, indent=1, default=str)[:3000],
                "```",
            ]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for results.json and results.md"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny sizes on the CPU (the test suite's run)"
    )
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS)
    parser.add_argument(
        "--budget-minutes", type=float, default=8.0, help="the whole run's time limit"
    )
    parser.add_argument(
        "--work-dir", default=None, help="where the synthetic data goes (default: the temp folder)"
    )
    parser.add_argument(
        "--keep-work", action="store_true", help="keep the synthetic data, archives and logs"
    )
    args = parser.parse_args(argv)
    if args.device is None:
        args.device = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(
            f"--device {args.device}: no CUDA device is available (use --dry-run on a CPU)"
        )
    if args.device == "cpu" and not args.dry_run:
        parser.error(
            "no CUDA device is available: the paper's sizes on a CPU would take hours; use --dry-run"
        )
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        # Tiny tensors: one thread is fastest, and steady on a shared machine.
        torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    ctx = Context(args)
    if ctx.device.type == "cuda":
        torch.cuda.set_device(ctx.device)
    sections: Dict[str, Dict[str, Any]] = {}
    write_results(ctx, sections, finished=False)
    for name in SECTIONS:
        if name not in args.sections:
            continue
        print(f"-- {name} ...", end=" ", flush=True)
        sections[name] = run_section(ctx, name)
        print(
            f"{sections[name]['status']} ({sections[name]['seconds']:.1f} s) {sections[name].get('reason', '')}",
            flush=True,
        )
        write_results(ctx, sections, finished=False)
    write_results(ctx, sections, finished=True)
    if not args.keep_work:
        shutil.rmtree(ctx.work, ignore_errors=True)
    print(
        f"wrote {args.out / RESULTS_JSON} and {args.out / RESULTS_MD} ({time.monotonic() - ctx.started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
