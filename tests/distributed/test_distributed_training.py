"""
ELMo-C pretraining on allennlp's distributed engine: 2 CPU worker processes (gloo) against one
process on the same global batch; the gradient all-reduce volume; the data split.
"""

from pathlib import Path
from typing import Dict, List

import pytest

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.models.archival import load_archive

import elmoc_allennlp  # noqa: F401
import elmoc_allennlp.training.atomic_checkpointer  # noqa: F401  (registers "elmoc_atomic")
from elmoc_allennlp.training.step_log_callback import read_step_log
from tests.conftest import FIXTURES_ROOT, LM_CORPUS

from benchmarks import allreduce_step_log  # noqa: F401  (registers "elmoc_allreduce_step_log")

NUM_SENTENCES = 48
WORDS_PER_SENTENCE = 6
GLOBAL_BATCH = 8
WORLD_SIZE = 2
NUM_EPOCHS = 2


def _equal_length_corpus(path: Path) -> Path:
    """
    Distinct sentences of the same length: then the mean per-token loss of a global batch is the
    mean of its halves' per-token losses, which is what DDP's gradient averaging optimises.
    """
    words = sorted(
        {w for line in (LM_CORPUS / "valid.txt").read_text().split("\n") for w in line.split()}
    )
    words += sorted(
        {w for p in LM_CORPUS.glob("train-*.txt") for w in p.read_text().split()} - set(words)
    )
    lines = []
    for index in range(NUM_SENTENCES):
        lines.append(
            " ".join(words[(index * 7 + 3 * k) % len(words)] for k in range(WORDS_PER_SENTENCE))
        )
    assert len(set(lines)) == NUM_SENTENCES
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _as_global_batches(corpus: Path, path: Path) -> Path:
    """
    The corpus in the order in which the 2 workers' batches make global batches: each worker
    reads its contiguous half (worker r: sentences r * 24 to r * 24 + 23), so global batch k is
    the k-th batch of each half, and one process reading this order gets the same batches.
    """
    lines = corpus.read_text(encoding="utf-8").splitlines()
    half, per_worker = len(lines) // WORLD_SIZE, GLOBAL_BATCH // WORLD_SIZE
    reordered = [
        line
        for start in range(0, half, per_worker)
        for rank in range(WORLD_SIZE)
        for line in lines[rank * half + start : rank * half + start + per_worker]
    ]
    assert sorted(reordered) == sorted(lines)
    path.write_text("\n".join(reordered) + "\n", encoding="utf-8")
    return path


def _config(corpus: Path, batch_size: int, distributed: bool) -> Dict:
    config = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")).as_dict()
    config["train_data_path"] = str(corpus)
    config.pop("validation_data_path", None)
    # Deterministic: no dropout, batches in corpus order.
    config["model"]["dropout"] = 0.0
    config["model"]["contextualizer"]["recurrent_dropout"] = 0.0
    config["data_loader"] = {"batch_size": batch_size, "shuffle": False}
    config["trainer"]["num_epochs"] = NUM_EPOCHS
    config["trainer"]["callbacks"] = [{"type": "elmoc_allreduce_step_log"}]
    if distributed:
        config["distributed"] = {"cuda_devices": [-1] * WORLD_SIZE}
    return config


def _steps(path: Path) -> List[Dict]:
    return [record for record in read_step_log(str(path)) if "loss" in record]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """
    The step logs of one process and of two workers trained on the same global batches.

    Slow (~17 s, once per module): real training twice, in this process and then in two gloo worker
    processes spawned by `train_model`, because the workers must be compared step by step with a
    real single-process run.
    """
    root = tmp_path_factory.mktemp("distributed")
    corpus = _equal_length_corpus(root / "corpus.txt")

    single_dir = root / "single"
    single_corpus = _as_global_batches(corpus, root / "single_corpus.txt")
    train_model(Params(_config(single_corpus, GLOBAL_BATCH, distributed=False)), str(single_dir))

    distributed_dir = root / "two_workers"
    # `train_model` spawns the worker processes (torch.multiprocessing, gloo on CPU) as
    # `allennlp train` does; the workers import the plugin by --include-package.
    train_model(
        Params(_config(corpus, GLOBAL_BATCH // WORLD_SIZE, distributed=True)),
        str(distributed_dir),
        include_package=["elmoc_allennlp", "benchmarks.allreduce_step_log"],
    )
    return single_dir, distributed_dir


def test_two_workers_match_one_process_on_the_same_global_batch(runs, capsys):
    """
    Two workers' mean loss is the single process's loss, step after step.

    Slow (~17 s, in the module-scoped `runs` setup): the biLM really trains in one process and in
    two spawned gloo workers, because only real distributed training shows the same updates.
    """
    single_dir, distributed_dir = runs
    single = _steps(single_dir / "step_log_w0.jsonl")
    workers = [_steps(distributed_dir / f"step_log_w{rank}.jsonl") for rank in range(WORLD_SIZE)]
    steps = NUM_EPOCHS * NUM_SENTENCES // GLOBAL_BATCH
    assert len(single) == steps
    assert [len(w) for w in workers] == [steps] * WORLD_SIZE

    differences = []
    for index in range(steps):
        one_process = single[index]["loss"]
        two_workers = sum(w[index]["loss"] for w in workers) / WORLD_SIZE
        differences.append(abs(two_workers - one_process))
        # Each worker's batch is half of the single process's: the halves differ...
        assert workers[0][index]["loss"] != workers[1][index]["loss"]
        # ... and their mean is the single-process loss, step after step (same updates).
        assert two_workers == pytest.approx(one_process, rel=1e-4, abs=1e-5), index
    # Training moved the loss, so matching is not trivial.
    assert single[-1]["loss"] < single[0]["loss"]
    with capsys.disabled():
        print(
            f"\nloss, 1 process vs 2 workers, {steps} steps: first {single[0]['loss']:.6f}, "
            f"last {single[-1]['loss']:.6f}, max |difference| {max(differences):.2e}"
        )

    # Every sentence was seen once per epoch, by exactly one worker.
    for epoch in range(NUM_EPOCHS):
        seen = sum(r["instances"] for w in workers for r in w if r["epoch"] == epoch)
        tokens = sum(r["tokens"] for w in workers for r in w if r["epoch"] == epoch)
        assert seen == NUM_SENTENCES
        assert tokens == NUM_SENTENCES * (WORDS_PER_SENTENCE + 2)

    # The archive of the distributed run loads and equals in shape the single-process one.
    archive = load_archive(distributed_dir / "model.tar.gz")
    single_archive = load_archive(single_dir / "model.tar.gz")
    distributed_state = archive.model.state_dict()
    for key, value in single_archive.model.state_dict().items():
        assert distributed_state[key].shape == value.shape
        assert (distributed_state[key] - value).abs().max() < 1e-3, key


def test_allreduce_volume_is_the_trainable_parameters(runs):
    _, distributed_dir = runs
    for rank in range(WORLD_SIZE):
        records = read_step_log(str(distributed_dir / f"step_log_w{rank}.jsonl"))
        start = [r for r in records if r.get("event") == "start"]
        assert len(start) == 1
        parameter_bytes = start[0]["trainable_parameter_bytes"]
        model = load_archive(distributed_dir / "model.tar.gz").model
        assert parameter_bytes == sum(
            p.numel() * p.element_size() for p in model.parameters() if p.requires_grad
        )
        steps = [r for r in records if "loss" in r]
        # Measured by the DDP communication hook (benchmarks/allreduce_step_log.py) in the real
        # run: exactly the gradients of the trainable parameters, every step; the frozen fastText
        # table is never communicated.
        assert {r["allreduce_bytes"] for r in steps} == {parameter_bytes}
