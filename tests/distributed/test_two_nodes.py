"""
Two `allennlp train` processes as node 0 and node 1 of one run on 127.0.0.1 (gloo, 2 workers
each: 4 ranks), as allennlp's multi-node settings say; node 1 is killed in the middle of an epoch
(node 0 then stops on the broken connection) and both are resumed with `--recover`. Node 1 kills
itself at a set batch (tests/distributed/node_down.py), so that where the run stops does not
depend on how busy the machine is.

Several minutes on a 2-core machine (6 processes that import torch and allennlp, twice), so it
runs when `ELMOC_TEST_TWO_NODES=1` (a CI step):

    ELMOC_TEST_TWO_NODES=1 python -m pytest tests/distributed/test_two_nodes.py
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from allennlp.models.archival import load_archive

from elmoc_allennlp.training.step_log_callback import read_step_log
from tests.conftest import FIXTURES_ROOT, LM_CORPUS

pytestmark = pytest.mark.skipif(
    os.environ.get("ELMOC_TEST_TWO_NODES") != "1", reason="minutes long: set ELMOC_TEST_TWO_NODES=1"
)

REPO = Path(__file__).resolve().parents[2]
# 30 batches an epoch per rank: node 1 goes down at batch 4 of epoch 1, after its checkpoint at
# batch 3, with most of the epoch left to recover.
FILES, SENTENCES_PER_FILE, BATCH, RANKS = 8, 120, 8, 4
NODE_DOWN = "1:4"
# Imported by the nodes only: this process's registry stays as it was.
NODE_DOWN_MODULE, NODE_DOWN_VARIABLE = "tests.distributed.node_down", "ELMOC_TEST_NODE_DOWN"


def _corpus(directory: Path) -> Dict[str, int]:
    """8 shards of distinct sentences; the number of sentences and of tokens with boundaries."""
    rng = random.Random(0)
    words = sorted(set((LM_CORPUS / "train-00001-of-00002.txt").read_text().split()))
    directory.mkdir()
    seen, tokens = set(), 0
    for shard in range(FILES):
        lines = []
        while len(lines) < SENTENCES_PER_FILE:
            line = " ".join(rng.choices(words, k=rng.randint(3, 12)))
            if line not in seen:
                seen.add(line)
                lines.append(line)
                tokens += len(line.split()) + 2
        (directory / f"part-{shard}.txt").write_text("\n".join(lines) + "\n")
    return {"instances": len(seen), "tokens": tokens}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_nodes(run: Path, corpus: Path, port: int, recover: bool) -> List[subprocess.Popen]:
    overrides = {
        "train_data_path": str(corpus / "*.txt"),
        "trainer.num_epochs": 2,
        "trainer.checkpointer.save_every_num_batches": 3,
        "trainer.callbacks": [{"type": "elmoc_step_log"}, {"type": "test_node_down"}],
        "distributed": {
            "cuda_devices": [-1, -1],
            "num_nodes": 2,
            "primary_address": "127.0.0.1",
            "primary_port": port,
        },
    }
    nodes = []
    for node in (0, 1):
        environment = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
        environment.pop(NODE_DOWN_VARIABLE, None)
        if node == 1 and not recover:
            environment[NODE_DOWN_VARIABLE] = NODE_DOWN
        command = [
            sys.executable,
            "-c",
            "from allennlp.commands import main; main(prog='allennlp')",
            "train",
            str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
            "-s",
            str(run / f"node{node}"),
            "--node-rank",
            str(node),
            "--include-package",
            "elmoc_allennlp",
            "--include-package",
            NODE_DOWN_MODULE,
            "-o",
            json.dumps(overrides),
        ] + (["--recover"] if recover else [])
        log = open(run / f"node{node}{'-recovered' if recover else ''}.log", "w")
        # Own process group: node 1 is killed whole, as a machine going down.
        nodes.append(
            subprocess.Popen(
                command,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return nodes


def _wait(process: subprocess.Popen, seconds: float) -> int:
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"a node ran past {seconds} s")


def _epoch_counts(run: Path, epoch: int) -> Dict[str, int]:
    """Instances and tokens trained in `epoch` by all ranks (a batch trained again counts once)."""
    totals = {"instances": 0, "tokens": 0}
    logs = sorted(run.glob("node*/step_log_w*.jsonl"))
    assert [log.name for log in logs] == [f"step_log_w{rank}.jsonl" for rank in range(RANKS)]
    for log in logs:
        batches = {
            r["batch"]: r
            for r in read_step_log(str(log))
            if r.get("epoch") == epoch and "batch" in r
        }
        for record in batches.values():
            totals["instances"] += record["instances"]
            totals["tokens"] += record["tokens"]
    return totals


def test_two_nodes_read_the_corpus_once_and_recover_from_a_lost_node(tmp_path, tiny_fasttext_path):
    corpus = tmp_path / "corpus"
    expected = _corpus(corpus)
    run = tmp_path / "run"
    run.mkdir()
    port = _free_port()
    node0, node1 = _start_nodes(run, corpus, port, recover=False)
    # Node 1 goes down in epoch 1, after a checkpoint at its batch 3 (killed whole: SIGKILL).
    assert _wait(node1, 400) == -signal.SIGKILL, (run / "node1.log").read_text()[-3000:]
    assert (run / "node1" / "model_state_e1_b3.th").exists()
    # Node 0 stops on the broken connection (gloo), it does not hang.
    assert _wait(node0, 120) != 0
    assert not (run / "node0" / "model.tar.gz").exists()

    # Epoch 0, trained before the kill: every sentence once, across the 4 ranks of both nodes.
    assert _epoch_counts(run, 0) == expected

    # The same settings (allennlp refuses a config that differs from the one it recovers).
    node0, node1 = _start_nodes(run, corpus, port, recover=True)
    assert [_wait(node0, 400), _wait(node1, 400)] == [0, 0], (
        run / "node0-recovered.log"
    ).read_text()[-3000:]
    # The interrupted epoch, finished after the restart: every sentence once.
    assert _epoch_counts(run, 1) == expected
    metrics = json.loads((run / "node0" / "metrics.json").read_text())
    assert metrics["epoch"] == 1
    archive = load_archive(str(run / "node0" / "model.tar.gz"))
    assert type(archive.model).__name__ == "BidirectionalLanguageModel"
