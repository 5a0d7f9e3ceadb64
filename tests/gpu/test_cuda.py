"""
GPU checks (skipped without CUDA; see benchmarks/README.md for the GPU run): the fast recurrence
equals the reference on CUDA, mixed-precision training of a tiny biLM, no host synchronisation
from the fastText lookup and the metrics, and 2-GPU DDP training when two GPUs are present.
"""

import linecache
import os
import warnings
from pathlib import Path

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.models.bilm_metrics import DeviceAverage
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import LayerNormLstm
from tests.conftest import FIXTURES_ROOT
from tests.models.bidirectional_language_model.test_no_host_syncs import _model_and_batch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")


def _to(tensors, device):
    if isinstance(tensors, dict):
        return {key: _to(value, device) for key, value in tensors.items()}
    return tensors.to(device, non_blocking=True)


def test_fast_path_equals_reference_on_cuda():
    torch.manual_seed(0)
    encoder = LayerNormLstm(12, 8, 16, num_layers=2, recurrent_dropout=0.0).to(CUDA).train()
    inputs = torch.randn(5, 9, 12, device=CUDA)
    mask = torch.ones(5, 9, dtype=torch.bool, device=CUDA)
    mask[1, 6:] = False
    mask[3, 2:] = False
    outputs, gradients = {}, {}
    for implementation in ("reference", "auto"):
        encoder.implementation = implementation
        encoder.zero_grad()
        leaf = inputs.clone().requires_grad_(True)
        output = encoder(leaf, mask)
        (output * torch.linspace(-1, 1, output.size(-1), device=CUDA)).sum().backward()
        outputs[implementation] = output.detach()
        gradients[implementation] = [leaf.grad] + [p.grad.clone() for p in encoder.parameters()]
    torch.testing.assert_close(outputs["auto"], outputs["reference"], rtol=1e-4, atol=1e-5)
    for fast, reference in zip(gradients["auto"], gradients["reference"]):
        torch.testing.assert_close(fast, reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_amp_training_of_a_tiny_bilm(dtype):
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("no bf16 on this GPU")
    model, tensors = _model_and_batch(gather=True)
    model.to(CUDA).train()
    tensors = _to(tensors, CUDA)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
    scaler = torch.cuda.amp.GradScaler(enabled=dtype == torch.float16)
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=dtype):
            loss = model(**tensors)["loss"]
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach().float())
    losses = torch.stack(losses).cpu()
    assert torch.isfinite(losses).all()
    assert losses[-1] < losses[0]
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    assert all(
        0.0 <= value <= 1.0
        for name, value in model.get_metrics().items()
        if name == "retrieval_accuracy"
    )


def test_embedder_and_metrics_never_synchronize():
    model, tensors = _model_and_batch(gather=True)
    model.to(CUDA).train()
    tensors = _to(tensors, CUDA)
    embedder = model._text_field_embedder
    predictions = torch.randn(40, 16, device=CUDA)
    targets = torch.randn(40, 16, device=CUDA)
    pair_mask = torch.ones(5, 8, dtype=torch.bool, device=CUDA)
    average = DeviceAverage()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        embedded = embedder(tensors["tokens"])
        embedded.sum().backward() if embedded.requires_grad else None
        average(embedded.mean())
        model._update_vector_metrics(
            "forward", predictions, targets, pair_mask, slice(None, -1), {}
        )
        average(model._retrieval_accuracy_of(predictions, targets))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert 0.0 <= model.get_metrics()["retrieval_accuracy"] <= 1.0


def test_the_training_step_synchronizes_only_where_documented():
    # docs/gpu_recurrence.md lists the remaining synchronisations of a step: boolean-mask
    # selection of the positions that predict (the biLM) and the recurrence's packing plan.
    model, tensors = _model_and_batch(gather=True)
    model.to(CUDA).train()
    tensors = _to(tensors, CUDA)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            optimizer.zero_grad()
            model(**tensors)["loss"].backward()
            optimizer.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    sites = {
        (Path(w.filename).name, linecache.getline(w.filename, w.lineno).strip())
        for w in caught
        if "synchroniz" in str(w.message)
    }
    for name, line in sites:
        assert name in {
            "layer_norm_lstm.py",
            "lstm_recurrence.py",
            "bidirectional_language_model.py",
        }, (name, line)
        assert "fasttext" not in name
        if name == "bidirectional_language_model.py":
            assert "[pair_mask]" in line, line


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_gpu_ddp_training(tmp_path):
    config = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")).as_dict()
    config["dataset_reader"]["token_indexers"]["fasttext"]["gather_vectors"] = True
    config["data_loader"] = {"batch_size": 4, "num_workers": 1}
    config["trainer"]["num_epochs"] = 1
    config["trainer"].pop("cuda_device", None)
    config["distributed"] = {"cuda_devices": [0, 1]}
    os.environ.setdefault("MASTER_PORT", "29517")
    train_model(Params(config), tmp_path / "ddp", include_package=["elmoc_allennlp"])
    metrics = (tmp_path / "ddp" / "metrics.json").read_text()
    assert "training_loss" in metrics and "NaN" not in metrics
