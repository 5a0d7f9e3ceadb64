"""The scale and fault-tolerance knobs of elmoc.libsonnet, and mixed precision."""

import json
from pathlib import Path

import _jsonnet
import pytest
import torch

from allennlp.common import Params
from allennlp.data import Batch, DatasetReader, Vocabulary
from allennlp.models import Model

import elmoc_allennlp  # noqa: F401
import elmoc_allennlp.training.atomic_checkpointer  # noqa: F401
import elmoc_allennlp.training.step_log_callback  # noqa: F401
from elmoc_allennlp.common import torch_versions
from tests.conftest import FIXTURES_ROOT, LM_CORPUS

LIBSONNET = (
    Path(__file__).resolve().parents[3] / "training_configs" / "pretrain" / "elmoc.libsonnet"
)
REQUIRED = {"fasttext_path": "ft.bin", "embedding_dim": 8, "train_data_path": "corpus/*"}


def _config(**settings) -> dict:
    snippet = (
        f"(import {json.dumps(str(LIBSONNET))}).config({json.dumps({**REQUIRED, **settings})})"
    )
    return json.loads(_jsonnet.evaluate_snippet("test", snippet))


def test_defaults_add_only_the_atomic_checkpointer():
    config = _config()
    assert config["trainer"]["checkpointer"] == {
        "type": "elmoc_atomic",
        "save_every_num_batches": None,
        "keep_most_recent_by_count": 2,
    }
    assert "distributed" not in config
    assert "directions" not in config["model"]
    assert "use_amp" not in config["trainer"] and "callbacks" not in config["trainer"]


def test_distributed_and_other_knobs():
    config = _config(
        cuda_devices=[0, 1, 2, 3],
        num_nodes=2,
        primary_address="10.0.0.1",
        primary_port=29500,
        directions="backward",
        checkpoint_every_num_batches=1000,
        use_amp=True,
        step_log=True,
    )
    assert config["distributed"] == {
        "cuda_devices": [0, 1, 2, 3],
        "num_nodes": 2,
        "primary_address": "10.0.0.1",
        "primary_port": 29500,
    }
    assert config["model"]["directions"] == "backward"
    assert config["trainer"]["checkpointer"]["save_every_num_batches"] == 1000
    assert config["trainer"]["use_amp"] is True
    assert config["trainer"]["callbacks"] == [{"type": "elmoc_step_log"}]
    assert _config(cuda_devices=[-1, -1])["distributed"] == {"cuda_devices": [-1, -1]}


CPU_BF16_LAYER_NORM = pytest.mark.skipif(
    not torch_versions.CPU_BF16_AUTOCAST_LAYER_NORM_BACKWARD,
    reason="torch 1.12: CPU bf16 autocast layer_norm backward",
)


@pytest.mark.parametrize(
    "implementation", ["auto", pytest.param("reference", marks=CPU_BF16_LAYER_NORM)]
)
def test_model_is_autocast_safe(implementation):
    """
    `use_amp` needs a GPU (allennlp's trainer uses CUDA autocast); on CPU, bfloat16 autocast
    exercises the same dtype paths: the loss stays finite and close to float32, on the fast
    (packed, fused kernels) and the reference LSTM path.
    """
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    params["model"]["contextualizer"]["implementation"] = implementation
    reader = DatasetReader.from_params(params["dataset_reader"])
    model = Model.from_params(vocab=Vocabulary.empty(), params=params["model"]).eval()
    batch = Batch(list(reader.read(LM_CORPUS / "valid.txt")))
    batch.index_instances(model.vocab)
    tensors = batch.as_tensor_dict()
    reference = model(**tensors)["loss"]
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = model(**tensors)
    output["loss"].backward()
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(**tensors)["loss"]
    assert torch.isfinite(mixed) and mixed.item() == pytest.approx(reference.item(), abs=0.05)
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in model.parameters()
        if p.requires_grad
    )
