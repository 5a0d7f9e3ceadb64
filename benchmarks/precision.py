"""
ELMo-C inference at float32, bfloat16 and int8 (issue #51): `ElmocEmbedder` (`dtype`) on a biLM of a
stated size, against the GEMM bound of each precision and against the peer, stock allennlp `Elmo`
(character CNN input) with an LSTM of the same size. One run on one machine, its CPU's name and
flags printed:

* **throughput**, per precision at 1 and 2 threads: tokens/s and sentences/s of
  `embed_sentences` (batches of `--batch-size`) over synthetic Zipfian sentences of 5-40 words;
  "x float32" is the ratio to the float32 row of the same threads; "GEMM bound" the fraction of that
  precision's bound reached: the time the run's matrix products alone take at that precision
  (measured here, shape by shape, the least of `--gemm-repeats`: the input projection over all
  tokens, each layer direction's input-to-gates product over all tokens and, per step, its
  state-to-gates product and cell projection at that step's batch size; at 2 threads each
  product's time at 2 threads or half its time on one, the less) over the run's time; the
  cosine of each token's
  vector in each layer (the projected input, then each LSTM layer) to float32's, min and mean;
* **latency** of one sentence at a time (the path a service takes: `embed_sentence`, batch 1, one
  thread) of 5, 20 and 60 tokens: p50 and p99 over `--latency-repeats` calls, for each precision
  and for `Elmo`.

* **training**, per precision (`trainer.precision`: float32, bfloat16) at 1 and 2 threads: one
  pretraining step (forward, backward, the config's Adam step) of the `--size` biLM as the
  product's pretraining config builds it (`training_configs/pretrain/elmoc.libsonnet`, through
  `benchmarks.common.write_one_step_bilm_config`: its dataset reader, model and optimizer; random
  weights) on one batch of the first `--batch-size` sentences above; the forward pass in the
  context the trainer wraps each batch in (`elmoc_allennlp.training.mixed_precision`'s
  `training_autocast_dtype` and `autocast`), so it measures what `trainer.precision` does.
  tokens/s (the batch's words over the least step time of `--repeats` steps after a warm-up
  step), "x float32" (the float32 row of the same threads), and the relative difference of the
  warm-up step's loss (the same weights, batch and dropout masks) to float32's. With `--archive`
  the training table is still of `--size`'s biLM (speed does not need trained weights).

Where the CPU has no native bfloat16 (`avx512_bf16`/`amx_bf16`), `dtype="bfloat16"` (and
`trainer.precision` bfloat16) runs float32 (with a warning), and its rows say so instead of
repeating float32's figures. With `ELMOC_EMULATE_BFLOAT16=1` on such a CPU the training table's
bfloat16 row gives its loss difference (bfloat16's numerics) but no speed (emulated). The biLM and
`Elmo` have random weights (written to a temporary archive, and options/weights hdf5): speed and
the precisions' agreement do not need trained ones, but a trained biLM's cosines may differ.

    python -m benchmarks.precision                   # ELMo "medium"'s LSTM: 2 x 2048 cells -> 256
    python -m benchmarks.precision --size paper      # the paper's: 2 x 4096 -> 512 (minutes)
    python -m benchmarks.precision --archive runs/elmoc/model.tar.gz   # your biLM
    python -m benchmarks.precision --quick           # a tiny biLM, seconds (the test's)
    python -m benchmarks.precision --tables training --threads 1   # the training step only
"""

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from benchmarks.common import (
    machine_description,
    random_fasttext,
    write_one_step_bilm_config,
    zipf_corpus,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("float32", "bfloat16", "int8")
TRAINING_PRECISIONS = ("float32", "bfloat16")  # trainer.precision's choices
TABLES = ("inference", "training")
LATENCY_LENGTHS = (5, 20, 60)
# ELMo's character CNN (its "medium" and "original" options): 2048 filters.
ELMO_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
TINY_FILTERS = [[1, 4], [2, 4]]


class Size(NamedTuple):
    name: str
    cell_dim: int
    projection_dim: int
    fasttext_dim: int
    highway: int  # the peer's highway layers (ELMo medium 1, original 2)


SIZES = {
    "tiny": Size("tiny (2 x 16 cells -> 8, 16-d fastText)", 16, 8, 16, 1),
    "medium": Size("ELMo medium's LSTM (2 x 2048 cells -> 256, 300-d fastText)", 2048, 256, 300, 1),
    "paper": Size("the paper's (2 x 4096 cells -> 512, 300-d fastText)", 4096, 512, 300, 2),
}


# ---------------------------------------------------------------------- the machine


def cpu_line() -> str:
    """The CPU's name and the flags that matter for float32, bfloat16 and int8 matrix products."""
    from elmoc_allennlp.common.precision import (
        REPORTED_CPU_FLAGS,
        cpu_flags,
        native_bfloat16,
        torch_cpu_capability,
    )

    flags = cpu_flags()
    listed = " ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in REPORTED_CPU_FLAGS)
    capability = torch_cpu_capability()
    native, evidence = native_bfloat16("cpu")
    return (
        f"CPU flags: {listed}"
        + (f"; torch CPU capability {capability}" if capability else "")
        + f"; native bfloat16: {'yes' if native else 'no'} ({evidence})"
        + f"; quantized engine {torch.backends.quantized.engine}"
    )


# ---------------------------------------------------------------------- the models


def bilm_config(size: Size, work: Path) -> Tuple[Path, Path]:
    """The product's pretraining config of a biLM of `size` (one epoch of 16 sentences), and its
    random fastText .bin (written once in `work`)."""
    fasttext = random_fasttext(
        work / "fasttext.bin", num_words=5000, bucket=20_000, dim=size.fasttext_dim, scale=0.3
    )
    corpus = zipf_corpus(work / "bilm_corpus", sentences=16, shards=1, seed=1)[0]
    config = write_one_step_bilm_config(
        work / "bilm.jsonnet",
        fasttext,
        corpus,
        size.fasttext_dim,
        size.projection_dim,
        size.cell_dim,
    )
    return config, fasttext


def build_bilm(size: Size, work: Path) -> Tuple[Path, Path]:
    """A biLM archive of `size` trained one step on 16 sentences (as good as random), and its .bin."""
    from allennlp.commands.train import train_model_from_file

    config, fasttext = bilm_config(size, work)
    train_model_from_file(str(config), str(work / "bilm"))
    return work / "bilm" / "model.tar.gz", fasttext


def write_elmo(folder: Path, cell_dim: int, projection_dim: int, layers: int, highway: int):
    """`options.json` and `weights.hdf5` of an `Elmo` with random weights (tests/test_good_guest.py's layout)."""
    import h5py

    filters = ELMO_FILTERS if projection_dim >= 64 else TINY_FILTERS
    options = {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": projection_dim,
            "cell_clip": 3,
            "proj_clip": 3,
            "dim": cell_dim,
            "n_layers": layers,
        },
        "char_cnn": {
            "activation": "relu",
            "filters": filters,
            "n_highway": highway,
            "embedding": {"dim": 16 if projection_dim >= 64 else 3},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }
    rng = np.random.default_rng(0)
    cnn = options["char_cnn"]
    total = sum(number for _, number in filters)

    def values(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)).astype("float32")

    folder.mkdir(parents=True, exist_ok=True)
    with h5py.File(folder / "weights.hdf5", "w") as out:
        out["char_embed"] = values(cnn["n_characters"] - 1, cnn["embedding"]["dim"])
        for index, (width, number) in enumerate(filters):
            out[f"CNN/W_cnn_{index}"] = values(1, width, cnn["embedding"]["dim"], number)
            out[f"CNN/b_cnn_{index}"] = values(number)
        for layer in range(highway):
            for name, shape in (
                ("W_transform", (total, total)),
                ("W_carry", (total, total)),
                ("b_transform", (total,)),
                ("b_carry", (total,)),
            ):
                out[f"CNN_high_{layer}/{name}"] = values(*shape)
        out["CNN_proj/W_proj"] = values(total, projection_dim)
        out["CNN_proj/b_proj"] = values(projection_dim)
        for direction in range(2):
            for layer in range(layers):
                cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
                out[f"{cell}/W_0"] = values(2 * projection_dim, 4 * cell_dim)
                out[f"{cell}/B"] = values(4 * cell_dim)
                out[f"{cell}/W_P_0"] = values(cell_dim, projection_dim)
    (folder / "options.json").write_text(json.dumps(options))
    return folder / "options.json", folder / "weights.hdf5"


class ElmoPeer:
    """Stock allennlp `Elmo` through the same calls as `ElmocEmbedder` (batches of words)."""

    def __init__(self, options: Path, weights: Path) -> None:
        from allennlp.modules.elmo import Elmo

        self.elmo = Elmo(str(options), str(weights), 1, dropout=0.0, requires_grad=False)
        self.elmo.eval()

    def embed_batch(self, sentences: List[List[str]]):
        from allennlp.modules.elmo import batch_to_ids

        with torch.no_grad():
            output = self.elmo(batch_to_ids(sentences))
        return output["elmo_representations"][0].numpy()

    def embed_sentence(self, sentence: List[str]):
        return self.embed_batch([sentence])[0]

    def embed_sentences(self, sentences, batch_size: int):
        for start in range(0, len(sentences), batch_size):
            yield from self.embed_batch(sentences[start : start + batch_size])


# ---------------------------------------------------------------------- the GEMM bound


def linear_calls(lengths: Sequence[int], batch_size: int, encoder, input_dim: int) -> Counter:
    """
    `(rows, in, out) -> count` of the matrix products of embedding sentences of `lengths` (boundaries
    added) in batches of `batch_size`: the input projection(s) and, per layer direction, the
    input-to-gates product over all tokens and per step the state-to-gates product (from the second
    step) and the cell projection at that step's batch size.
    """
    P, C = encoder.projection_dim, encoder.cell_dim
    projections = 2 if encoder.separate_input_projections else 1
    directions = 2 * encoder.num_layers
    calls: Counter = Counter()
    for start in range(0, len(lengths), batch_size):
        batch = [length + 2 for length in lengths[start : start + batch_size]]
        rows = sum(batch)
        calls[(rows, input_dim, P)] += projections
        calls[(rows, P, 4 * C)] += directions
        for step in range(max(batch)):
            running = sum(1 for length in batch if length > step)
            if step > 0:
                calls[(running, P, 4 * C)] += directions
            calls[(running, C, P)] += directions
    return calls


def linear_seconds(rows: int, inputs: int, outputs: int, precision: str, repeats: int) -> float:
    """The least time of one `(rows, inputs) x (inputs, outputs)` product at `precision` (as the rows'
    best pass: the least disturbed by other jobs)."""
    from elmoc_allennlp.common.precision import prepare_encoder

    x = torch.randn(rows, inputs)
    linear = torch.nn.Linear(inputs, outputs, bias=False)
    if precision == "int8":
        holder = torch.nn.Module()
        holder.inference_input_dtype = None
        holder.linear = linear
        prepare_encoder(holder, "int8", "cpu")
        linear = holder.linear
    elif precision == "bfloat16":
        linear, x = linear.to(torch.bfloat16), x.to(torch.bfloat16)
    times = []
    with torch.no_grad():
        linear(x)
        for _ in range(repeats):
            started = time.perf_counter()
            linear(x)
            times.append(time.perf_counter() - started)
    return min(times)


def gemm_bound_seconds(calls: Counter, precision: str, repeats: int) -> float:
    """
    What the products of `calls` take at `precision` and the current thread count T: each at T
    threads, or its time on one thread over T where that is less (the two directions of a layer
    are independent products: on T threads, at most 1/T of their time each, as the recurrence runs
    them, one direction a thread).
    """
    threads = torch.get_num_threads()
    total = 0.0
    for shape, count in calls.items():
        seconds = linear_seconds(*shape, precision, repeats)
        if threads > 1:
            torch.set_num_threads(1)
            try:
                seconds = min(seconds, linear_seconds(*shape, precision, repeats) / threads)
            finally:
                torch.set_num_threads(threads)
        total += count * seconds
    return total


# ---------------------------------------------------------------------- measurements


def best_seconds(function: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def cosines(ours: List[np.ndarray], reference: List[np.ndarray]) -> List[Tuple[float, float]]:
    """Per layer: min and mean over tokens of the cosine of `ours` to `reference` (`(layers, tokens, dim)`)."""
    a = np.concatenate([array.astype(np.float64) for array in ours], axis=1)
    b = np.concatenate([array.astype(np.float64) for array in reference], axis=1)
    dot = (a * b).sum(-1)
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    cos = dot / np.maximum(norms, 1e-30)
    return [(float(layer.min()), float(layer.mean())) for layer in cos]


def percentile_ms(times: List[float], q: float) -> float:
    return float(np.percentile(np.array(times) * 1e3, q))


def latency(model, sentences: Dict[int, List[str]], repeats: int) -> Dict[int, Tuple[float, float]]:
    """Per length: p50 and p99 ms of `model.embed_sentence` (after one warm-up call)."""
    result = {}
    for length, sentence in sentences.items():
        model.embed_sentence(sentence)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            model.embed_sentence(sentence)
            times.append(time.perf_counter() - started)
        result[length] = (percentile_ms(times, 50), percentile_ms(times, 99))
    return result


def measure(args: argparse.Namespace, work: Path) -> List[str]:
    """Builds (or opens) the biLM and the peer in `work`, measures, and returns the report's lines."""
    from elmoc_allennlp.common.precision import native_bfloat16
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    size = SIZES[args.size]
    if args.archive is None:
        archive, vectors = build_bilm(size, work)
        described = size.name
    else:
        archive, vectors = Path(args.archive), args.vectors_path
    reference = ElmocEmbedder(str(archive), vectors_path=vectors and str(vectors))
    encoder = reference.bilm.bilm.contextualizer
    input_dim = encoder.get_input_dim()
    layers = encoder.num_layers
    if args.archive is not None:
        described = (
            f"{archive}: {layers} x {encoder.cell_dim} cells -> {encoder.projection_dim}, "
            f"{input_dim}-d input"
        )
    options, weights = write_elmo(
        work / "elmo",
        encoder.cell_dim,
        encoder.projection_dim,
        layers,
        SIZES["paper"].highway if encoder.cell_dim >= 4096 else 1,
    )
    peer = ElmoPeer(options, weights)

    rng = np.random.default_rng(0)
    sentences = benchmark_sentences(args, work)
    tokens = sum(len(sentence) for sentence in sentences)
    vocabulary = [f"w{index}" for index in range(1000)]
    single = {
        length: [str(word) for word in rng.choice(vocabulary, size=length)]
        for length in LATENCY_LENGTHS
    }
    native, evidence = native_bfloat16("cpu")
    embedders = {"float32": reference}
    for precision in PRECISIONS[1:]:
        if precision == "bfloat16" and not native:
            continue
        embedders[precision] = ElmocEmbedder(
            str(archive), vectors_path=vectors and str(vectors), dtype=precision
        )
    calls = linear_calls([len(s) for s in sentences], args.batch_size, encoder, input_dim)
    flop = sum(2 * rows * k * n * count for (rows, k, n), count in calls.items())

    lines = [
        f"# biLM: {described}; peer: allennlp Elmo, the same LSTM, ELMo's character CNN "
        f"({'2048 filters' if encoder.projection_dim >= 64 else 'tiny'}); {len(sentences)} "
        f"sentences, {tokens:,} tokens, batches of {args.batch_size}; {flop / 1e9:.2f} GFLOP of "
        f"matrix products per pass; best of {args.repeats} passes; load average "
        f"{os.getloadavg()[0]:.1f} at start",
        "",
        "| model | threads | tokens/s | sentences/s | x float32 | GEMM bound reached | cosine to "
        "float32 per layer (min / mean) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    previous_threads = torch.get_num_threads()
    outputs: Dict[str, List[np.ndarray]] = {}
    try:
        for threads in args.threads:
            torch.set_num_threads(threads)
            baseline = None
            for precision in PRECISIONS:
                if precision not in embedders:
                    lines.append(
                        f"| ELMo-C bfloat16 | {threads} | ran as float32: {evidence}; the figures "
                        "do not apply | | | | |"
                    )
                    continue
                embedder = embedders[precision]

                def run(embedder=embedder, precision=precision) -> None:
                    # The first pass's vectors are kept (for the cosines): the same work.
                    vectors = list(embedder.embed_sentences(sentences, batch_size=args.batch_size))
                    outputs.setdefault(precision, vectors)

                run()  # warm-up
                seconds = best_seconds(run, args.repeats)
                baseline = seconds if precision == "float32" else baseline
                bound = gemm_bound_seconds(calls, precision, args.gemm_repeats)
                agreement = " ".join(
                    f"L{index} {low:.4f} / {mean:.4f}"
                    for index, (low, mean) in enumerate(
                        cosines(outputs[precision], outputs["float32"])
                    )
                )
                lines.append(
                    f"| ELMo-C {precision} | {threads} | {tokens / seconds:,.0f} | "
                    f"{len(sentences) / seconds:,.1f} | {baseline / seconds:.2f} | "
                    f"{bound / seconds:.2f} | {agreement} |"
                )
            list(peer.embed_sentences(sentences, args.batch_size))  # warm-up
            seconds = best_seconds(
                lambda: list(peer.embed_sentences(sentences, args.batch_size)), args.repeats
            )
            lines.append(
                f"| allennlp Elmo (float32) | {threads} | {tokens / seconds:,.0f} | "
                f"{len(sentences) / seconds:,.1f} | {baseline / seconds:.2f} | - | - |"
            )
            sys.stderr.write(f"# {threads} thread(s) done\n")

        torch.set_num_threads(1)
        lines += [
            "",
            f"Latency of one sentence (`embed_sentence`, batch 1, 1 thread), ms over "
            f"{args.latency_repeats} calls:",
            "",
            "| model | "
            + " | ".join(f"{length} tokens p50 / p99" for length in LATENCY_LENGTHS)
            + " | p50 x Elmo's |",
            "|---|" + "---:|" * (len(LATENCY_LENGTHS) + 1),
        ]
        peer_latency = latency(peer, single, args.latency_repeats)
        for precision in PRECISIONS:
            if precision not in embedders:
                lines.append(
                    "| ELMo-C bfloat16 | ran as float32: the figures do not apply |"
                    + " |" * len(LATENCY_LENGTHS)
                )
                continue
            measured = latency(embedders[precision], single, args.latency_repeats)
            ratios = "/".join(
                f"{peer_latency[length][0] / measured[length][0]:.1f}" for length in LATENCY_LENGTHS
            )
            lines.append(
                f"| ELMo-C {precision} | "
                + " | ".join(
                    f"{measured[n][0]:.1f} / {measured[n][1]:.1f}" for n in LATENCY_LENGTHS
                )
                + f" | {ratios} |"
            )
        lines.append(
            "| allennlp Elmo (float32) | "
            + " | ".join(
                f"{peer_latency[n][0]:.1f} / {peer_latency[n][1]:.1f}" for n in LATENCY_LENGTHS
            )
            + " | 1 |"
        )
    finally:
        torch.set_num_threads(previous_threads)
    return lines


def benchmark_sentences(args: argparse.Namespace, work: Path) -> List[List[str]]:
    """The run's `--sentences` synthetic Zipfian sentences of 5-40 words (written once in `work`)."""
    corpus = work / "sentences" / "news.en-00000-of-00001"
    if not corpus.exists():
        corpus = zipf_corpus(work / "sentences", args.sentences, 1, seed=2)[0]
    return [line.split() for line in corpus.read_text().splitlines()][: args.sentences]


# ---------------------------------------------------------------------- the training step


def native_bfloat16_speed() -> Tuple[bool, str]:
    """Whether this CPU computes bfloat16 natively, `ELMOC_EMULATE_BFLOAT16` aside (emulated
    bfloat16 has bfloat16's numerics, not its speed), and what says so."""
    from elmoc_allennlp.common.precision import EMULATE_BFLOAT16, native_bfloat16

    saved = os.environ.pop(EMULATE_BFLOAT16, None)
    try:
        return native_bfloat16("cpu")
    finally:
        if saved is not None:
            os.environ[EMULATE_BFLOAT16] = saved


def training_setup(size: Size, work: Path, sentences: List[List[str]]):
    """
    The pretraining config's model of `size` (random weights), a function making its optimizer
    (the config's Adam), and one batch of `sentences` through the config's dataset reader.
    """
    from allennlp.common import Params
    from allennlp.data import Batch, DatasetReader, Vocabulary
    from allennlp.models import Model
    from allennlp.training.optimizers import Optimizer

    config, _ = bilm_config(size, work)
    params = Params.from_file(str(config))
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    vocabulary = Vocabulary.from_params(params.pop("vocabulary"))
    model = Model.from_params(vocab=vocabulary, params=params.pop("model"))
    optimizer_params = params.pop("trainer").pop("optimizer")
    instances = [reader.text_to_instance(sentence) for sentence in sentences]
    for instance in instances:
        reader.apply_token_indexers(instance)
    batch = Batch(instances)
    batch.index_instances(vocabulary)

    def optimizer():
        parameters = [[n, p] for n, p in model.named_parameters() if p.requires_grad]
        return Optimizer.from_params(
            model_parameters=parameters, params=optimizer_params.duplicate()
        )

    return model, optimizer, batch.as_tensor_dict()


def measure_training(args: argparse.Namespace, work: Path) -> List[str]:
    """One pretraining step per precision and thread count (the training table's lines)."""
    from elmoc_allennlp.common.precision import EMULATE_BFLOAT16
    from elmoc_allennlp.training.mixed_precision import autocast, training_autocast_dtype

    size = SIZES[args.size]
    sentences = benchmark_sentences(args, work)[: args.batch_size]
    tokens = sum(len(sentence) for sentence in sentences)
    model, make_optimizer, tensors = training_setup(size, work, sentences)
    model.train()
    initial = {name: value.clone() for name, value in model.state_dict().items()}
    device = torch.device("cpu")
    # What the trainer decides for each `trainer.precision` (a warning where bfloat16 is not native).
    dtypes = {
        precision: training_autocast_dtype(precision, device, use_amp=False)
        for precision in TRAINING_PRECISIONS
    }
    speed_applies, evidence = native_bfloat16_speed()
    lines = [
        "",
        f"Training step (`trainer.precision`; forward, backward and Adam step of the pretraining "
        f"config's biLM: {size.name}, random weights; one batch of {len(sentences)} sentences, "
        f"{tokens:,} tokens; best of {args.repeats} steps after a warm-up step; loss difference: "
        "the warm-up step's, the same weights, batch and dropout masks):",
        "",
        "| precision | threads | tokens/s | x float32 | loss relative difference to float32 |",
        "|---|---:|---:|---:|---:|",
    ]
    previous_threads = torch.get_num_threads()
    try:
        for threads in args.threads:
            torch.set_num_threads(threads)
            baseline_seconds = baseline_loss = None
            for precision in TRAINING_PRECISIONS:
                dtype = dtypes[precision]
                if precision != "float32" and dtype is None:
                    lines.append(
                        f"| {precision} | {threads} | ran as float32: {evidence}; the figures do "
                        "not apply | | |"
                    )
                    continue
                model.load_state_dict(initial)
                optimizer = make_optimizer()

                def step(optimizer=optimizer, dtype=dtype) -> float:
                    optimizer.zero_grad()
                    with autocast(device, dtype):
                        loss = model(**tensors)["loss"]
                    loss.backward()
                    optimizer.step()
                    return float(loss)

                torch.manual_seed(1)  # the same recurrent dropout masks in every row
                loss = step()  # warm-up (the optimizer's state), at the initial weights
                seconds = best_seconds(step, args.repeats)
                if precision == "float32":
                    baseline_seconds, baseline_loss = seconds, loss
                    difference = "0 (reference)"
                else:
                    difference = f"{abs(loss - baseline_loss) / abs(baseline_loss):.2e}"
                if precision == "float32" or speed_applies:
                    speed = f"{tokens / seconds:,.0f} | {baseline_seconds / seconds:.2f}"
                else:
                    speed = f"emulated ({EMULATE_BFLOAT16}; {evidence}): no speed figure | -"
                lines.append(f"| {precision} | {threads} | {speed} | {difference} |")
            sys.stderr.write(f"# training, {threads} thread(s) done\n")
    finally:
        torch.set_num_threads(previous_threads)
        model.load_state_dict(initial)
    return lines


def main(arguments: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="medium")
    parser.add_argument(
        "--archive", default=None, help="measure this biLM archive instead of a random one"
    )
    parser.add_argument(
        "--vectors-path", default=None, help="the archive's fastText .bin, if not where it says"
    )
    parser.add_argument("--sentences", type=int, default=64, help="sentences per pass")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="passes per row (the best counts)")
    parser.add_argument("--latency-repeats", type=int, default=20)
    parser.add_argument("--gemm-repeats", type=int, default=5, help="timings per product shape")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--tables",
        nargs="+",
        choices=TABLES,
        default=list(TABLES),
        help="which tables: inference (throughput and latency), training (a pretraining step)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny biLM (the inference tables': unless --archive), 8 sentences, 1 pass or "
        "step, 2 latency calls: seconds",
    )
    args = parser.parse_args(arguments)
    if args.quick:
        args.size = "tiny"
        args.sentences, args.repeats, args.latency_repeats, args.gemm_repeats = 8, 1, 2, 1
    from allennlp.common.util import import_module_and_submodules

    import_module_and_submodules("elmoc_allennlp")
    print(f"# python -m benchmarks.precision {' '.join(arguments or sys.argv[1:])}")
    print(f"# {platform.python_implementation()} {platform.python_version()}", flush=True)
    # Quiet, seeded, and as it found them afterwards (tests call `main` in their process).
    loggers = [logging.getLogger(name) for name in ("allennlp", "elmoc_allennlp")]
    levels = [each.level for each in loggers]
    with warnings.catch_warnings(), torch.random.fork_rng():
        warnings.filterwarnings("ignore")
        torch.manual_seed(0)
        for each in loggers:
            each.setLevel(logging.WARNING)
        try:
            print(f"# {machine_description()}")
            print(f"# {cpu_line()}", flush=True)
            with tempfile.TemporaryDirectory(prefix="precision_benchmark.") as work:
                if "inference" in args.tables:
                    print("\n".join(measure(args, Path(work))), flush=True)
                if "training" in args.tables:
                    print("\n".join(measure_training(args, Path(work))), flush=True)
            print(f"# load average {os.getloadavg()[0]:.1f} at the end", flush=True)
        finally:
            for each, level in zip(loggers, levels):
                each.setLevel(level)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
