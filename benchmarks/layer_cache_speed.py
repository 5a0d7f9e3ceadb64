"""
What the layer cache (`cache_directory` on `elmoc_token_embedder`, issue #36) saves, through
`allennlp train`: the NER tagger of `training_configs/downstream/ner_crf_tagger.jsonnet`
(fastText + character CNN + ELMo-C, 2-layer BiLSTM, CRF) on the first `--train-sentences`
sentences of CoNLL-2003 eng.train, validated on the first `--dev-sentences` of eng.testa, with

* the fastText + character CNN tagger alone (no biLM: the config with `ELMOC_ARCHIVE=''`),
* live ELMo-C (the biLM runs every step),
* the layer cache, float32 (epoch 1 fills it, epochs 2+ read it) and float16,

for a quickstart-size biLM (`elmoc_small.jsonnet`: 512 cells -> 128 per direction, 256-d layers)
and a paper-size one (`elmoc.libsonnet`'s defaults: 4096 -> 512, 1024-d layers). The biLMs are
trained for one step on 16 sentences (random weights, for timing: the layers cost the same); the
fastText model (300-d, as the paper's) is trained on the task's own text. Times are CPU seconds
of this process (on a loaded machine they vary far less than wall time; `--threads 1`) of the
trainer's epoch (forward, backward, optimizer) and of its validation pass, per epoch, with the wall
seconds of epochs 2+ beside them, and "cache 2+", the CPU seconds per epoch 2+ spent inside the
layer cache (hashing ids, reading, checking and copying the stored layers: training and
validation passes together); the
last columns are the validation F1 and loss of the best epoch and the cache's bytes on disk per stored token
(the two boundary positions of each sentence included). Needs ../shared/data/conll2003 (or
`--data`); without it, says so and exits 0.

    python -m benchmarks.layer_cache_speed                       # both sizes, 3 epochs, 1 thread
    python -m benchmarks.layer_cache_speed --sizes quickstart --epochs 4
"""

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

from allennlp.training.callbacks import TrainerCallback

from benchmarks.common import write_one_step_bilm_config

REPO_ROOT = Path(__file__).resolve().parents[1]

NER_CONFIG = REPO_ROOT / "training_configs" / "downstream" / "ner_crf_tagger.jsonnet"
BILM_SIZES = {"quickstart": (512, 128), "paper": (4096, 512)}  # (cell_dim, projection_dim)
FASTTEXT_DIM = 300
METRIC = "f1-measure-overall"

# Filled by the callback of the run in progress.
_TIMES: Dict[str, List[float]] = {}


@TrainerCallback.register("layer_cache_timer")
class EpochTimer(TrainerCallback):
    """Times each epoch's training and validation passes (wraps the trainer's two methods)."""

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        _TIMES.clear()
        _TIMES.update(train=[], validation=[], train_wall=[], validation_wall=[], cache=[0.0])
        for module in trainer.model.modules():
            cache = getattr(module, "layer_cache", None)
            if (
                cache is not None
            ):  # CPU seconds inside the cache (reading, or filling + the live biLM)

                def timed_cache(*args, _method=cache.activations, **kw):
                    start = time.process_time()
                    result = _method(*args, **kw)
                    _TIMES["cache"][-1] += time.process_time() - start
                    return result

                cache.activations = timed_cache
        for name, key in (("_train_epoch", "train"), ("_validation_loss", "validation")):
            method = getattr(trainer, name)

            def timed(*args, _method=method, _key=key, **kw):
                start, start_wall = time.process_time(), time.perf_counter()
                result = _method(*args, **kw)
                _TIMES[_key].append(time.process_time() - start)
                _TIMES[_key + "_wall"].append(time.perf_counter() - start_wall)
                if _key == "validation":
                    _TIMES["cache"].append(0.0)
                return result

            setattr(trainer, name, timed)


def read_sentences(path: Path, count: int) -> List[List[str]]:
    """The first `count` sentences of a CoNLL-2003 file, as their lines."""
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if current:
                sentences.append(current)
                current = []
                if len(sentences) == count:
                    break
            continue
        current.append(line)
    if current and len(sentences) < count:
        sentences.append(current)
    return sentences


def write_sentences(sentences: List[List[str]], path: Path) -> Path:
    path.write_text("".join("\n".join(lines) + "\n\n" for lines in sentences), encoding="utf-8")
    return path


def build_fasttext(sentences: List[List[str]], path: Path) -> Path:
    from elmoc_allennlp.fasttext.training import train_fasttext

    if path.exists():
        return path
    corpus = path.with_suffix(".txt")
    corpus.write_text(
        "".join(" ".join(line.split()[0] for line in s) + "\n" for s in sentences), encoding="utf-8"
    )
    return train_fasttext(
        corpus, path, dim=FASTTEXT_DIM, min_count=1, minn=3, maxn=6, bucket=100_000, epoch=5
    )


def build_bilm(size: str, fasttext: Path, corpus: Path, directory: Path) -> Path:
    """A biLM archive of the given size, trained one step (its weights are as good as random)."""
    from allennlp.commands.train import train_model_from_file

    archive = directory / "model.tar.gz"
    if archive.exists():
        return archive
    cell_dim, projection_dim = BILM_SIZES[size]
    config = directory.parent / f"bilm_{size}.jsonnet"
    write_one_step_bilm_config(config, fasttext, corpus, FASTTEXT_DIM, projection_dim, cell_dim)
    train_model_from_file(str(config), str(directory))
    return archive


def train_ner(
    run_dir: Path, environment: Dict[str, str], epochs: int, lr: float, extra: Dict
) -> Dict:
    from allennlp.commands.train import train_model_from_file

    os.environ.update(environment)
    overrides = {
        "trainer.num_epochs": epochs,
        "trainer.optimizer.lr": lr,
        "trainer.patience": None,
        "trainer.checkpointer.save_completed_epochs": False,
        "trainer.callbacks": [{"type": "layer_cache_timer"}],
        "evaluate_on_test": False,
        "test_data_path": None,
        **extra,
    }
    train_model_from_file(str(NER_CONFIG), str(run_dir), overrides=json.dumps(overrides))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    result = {name: list(values) for name, values in _TIMES.items()}
    result.update(
        {"f1": metrics[f"best_validation_{METRIC}"], "loss": metrics["best_validation_loss"]}
    )
    gc.collect()
    return result


def cache_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.lmdb"))


def main(arguments: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "conll2003"
    )
    parser.add_argument("--train-sentences", type=int, default=2000)
    parser.add_argument("--dev-sentences", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=3, help="at least 2: epoch 1 fills, 2+ read")
    parser.add_argument(
        "--sizes", nargs="+", choices=sorted(BILM_SIZES), default=["quickstart", "paper"]
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--lr",
        type=float,
        default=0.005,
        help="Adam's learning rate (the recipe's 0.001 leaves F1 at 0 after 3 short epochs)",
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="kept if given (biLMs are reused)"
    )
    args = parser.parse_args(arguments)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2")
    if not (args.data / "eng.train").is_file() or not (args.data / "eng.testa").is_file():
        print(f"CoNLL-2003 not found in {args.data} (eng.train, eng.testa): nothing to measure.")
        return 0

    import logging

    from allennlp.common.util import import_module_and_submodules

    logging.basicConfig(level=logging.WARNING)
    for name in ("allennlp", "elmoc_allennlp"):
        logging.getLogger(name).setLevel(logging.WARNING)
    import_module_and_submodules("allennlp_models")
    import_module_and_submodules("elmoc_allennlp")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        return measure(args, args.work_dir)
    # Several hundred MB of runs and caches: removed however the run ends.
    with tempfile.TemporaryDirectory(prefix="layer_cache_speed.") as work:
        return measure(args, Path(work))


def measure(args: argparse.Namespace, work: Path) -> int:
    """Trains every tagger in `work` and prints the table."""
    train = read_sentences(args.data / "eng.train", args.train_sentences)
    dev = read_sentences(args.data / "eng.testa", args.dev_sentences)
    train_path = write_sentences(train, work / "train.conll")
    dev_path = write_sentences(dev, work / "dev.conll")
    tokens = sum(len(s) for s in train + dev)
    positions = tokens + 2 * len(train + dev)
    fasttext = build_fasttext(train + dev, work / "fasttext.bin")
    bilm_corpus = work / "bilm_corpus.txt"
    bilm_corpus.write_text(
        "".join(" ".join(line.split()[0] for line in s) + "\n" for s in train[:16]),
        encoding="utf-8",
    )
    base = {
        "ELMOC_FASTTEXT": str(fasttext),
        "ELMOC_FASTTEXT_DIM": str(FASTTEXT_DIM),
        "NER_TRAIN_DATA_PATH": str(train_path),
        "NER_VALIDATION_DATA_PATH": str(dev_path),
        "NER_TEST_DATA_PATH": str(dev_path),
    }
    print(
        f"# {len(train)} training / {len(dev)} validation sentences ({tokens} tokens), {args.epochs} "
        f"epochs, Adam lr {args.lr}, torch {torch.__version__}, {args.threads} thread(s), "
        f"{platform.processor() or platform.machine()}, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at start",
        flush=True,
    )

    rows = []
    no_bilm = {**base, "ELMOC_ARCHIVE": "", "ELMOC_DIM": "0"}
    fasttext_only = train_ner(work / "run_fasttext", no_bilm, args.epochs, args.lr, {})
    rows.append(("fastText + char CNN only", "-", fasttext_only, None))
    print("# fastText only done", flush=True)
    for size in args.sizes:
        bilm = build_bilm(size, fasttext, bilm_corpus, work / f"bilm_{size}")
        environment = {
            **base,
            "ELMOC_ARCHIVE": str(bilm),
            "ELMOC_DIM": str(2 * BILM_SIZES[size][1]),
        }
        embedder = "model.text_field_embedder.token_embedders.elmo"
        live = train_ner(work / f"run_{size}_live", environment, args.epochs, args.lr, {})
        rows.append((f"ELMo-C {size}, live", size, live, None))
        for dtype in ("float32", "float16"):
            cache = work / f"cache_{size}_{dtype}"
            extra = {f"{embedder}.cache_directory": str(cache), f"{embedder}.cache_dtype": dtype}
            result = train_ner(
                work / f"run_{size}_{dtype}", environment, args.epochs, args.lr, extra
            )
            rows.append(
                (f"ELMo-C {size}, cache {dtype}", size, result, cache_bytes(cache) / positions)
            )
        print(f"# {size} done", flush=True)

    baseline = sum(fasttext_only["train"][1:]) / (args.epochs - 1)
    header = (
        f"{'tagger':34} {'epoch 1 s':>9} {'epochs 2+ s':>11} {'vs fastText':>11} {'eval 1 s':>8} "
        f"{'eval 2+ s':>9} {'cache 2+ s':>10} {'wall 2+ s':>9} {'dev F1':>7} {'dev loss':>9} {'bytes/token':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, _, result, per_token in rows:
        later = sum(result["train"][1:]) / (args.epochs - 1)
        later_eval = sum(result["validation"][1:]) / (args.epochs - 1)
        later_wall = sum(result["train_wall"][1:]) / (args.epochs - 1)
        cache_later = sum(result["cache"][1 : args.epochs]) / (args.epochs - 1)
        print(
            f"{name:34} {result['train'][0]:9.1f} {later:11.1f} {later / baseline:10.2f}x "
            f"{result['validation'][0]:8.1f} {later_eval:9.1f} "
            f"{'-' if per_token is None else f'{cache_later:.1f}':>10} {later_wall:9.1f} "
            f"{100 * result['f1']:7.2f} {result['loss']:9.3f} "
            f"{'-' if per_token is None else f'{per_token:,.0f}':>11}"
        )
    kept = f"work dir {work}" if args.work_dir is not None else "work dir removed"
    print(f"# load average {os.getloadavg()[0]:.1f} at the end; {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
