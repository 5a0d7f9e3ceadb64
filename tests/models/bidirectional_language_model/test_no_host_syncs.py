"""
The biLM's training step without host synchronisations from the fastText lookup and the metrics
(CPU checks; `tests/gpu/` runs the same step under CUDA's sync debug mode).
"""

import copy
import sys

import pytest
import torch

from allennlp.common import Params
from allennlp.data import Batch, Vocabulary
from allennlp.data.data_loaders import MultiProcessDataLoader
from allennlp.data.dataset_readers import DatasetReader
from allennlp.models import Model
from allennlp.training.metrics import Average

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.models.bilm_metrics import DeviceAverage
from tests.conftest import FIXTURES_ROOT, LM_CORPUS


def _params(gather: bool) -> Params:
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    if gather:
        params["dataset_reader"]["token_indexers"]["fasttext"]["gather_vectors"] = True
    return params


def _model_and_batch(gather: bool, seed: int = 3):
    params = _params(gather)
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    instances = list(reader.read(LM_CORPUS / "valid.txt"))
    vocab = Vocabulary.from_instances(instances)
    torch.manual_seed(seed)
    model = Model.from_params(vocab=vocab, params=params.pop("model"))
    batch = Batch(instances)
    batch.index_instances(vocab)
    return model, batch.as_tensor_dict()


class _NoTableReads:
    """
    Makes reading the fastText table, or any read of a tensor's values on the host, raise:
    `.item()`, `float()`, `int()`, `bool()` (`if t.any():`), `.tolist()`, `.numpy()`, `.cpu()`,
    `.nonzero()` (whose output size waits for the device). Reads from the functions in `allowed`
    (the known ones, `docs/gpu_recurrence.md`) are let through and counted in `allowed_reads`.
    """

    def __init__(self, monkeypatch, allowed=()):
        self.monkeypatch = monkeypatch
        self.allowed = set(allowed)
        self.allowed_reads = 0

    def __enter__(self):
        def refusing(original):
            def refuse(*args, **kwargs):
                if sys._getframe(1).f_code.co_name in self.allowed:
                    self.allowed_reads += 1
                    return original(*args, **kwargs)
                raise AssertionError("host-side read inside the model's forward")

            return refuse

        for owner, name in (
            (FastTextVectors, "rows"),
            (torch.Tensor, "item"),
            (torch.Tensor, "__float__"),
            (torch.Tensor, "__int__"),
            (torch.Tensor, "__bool__"),
            (torch.Tensor, "tolist"),
            (torch.Tensor, "numpy"),
            (torch.Tensor, "cpu"),
            (torch.Tensor, "nonzero"),
            (torch, "nonzero"),
        ):
            self.monkeypatch.setattr(owner, name, refusing(getattr(owner, name)))
        return self

    def __exit__(self, *exc):
        self.monkeypatch.undo()


def test_the_gathered_batch_trains_to_the_same_values_as_the_model_lookup(monkeypatch):
    model, tensors = _model_and_batch(gather=False)
    gathered_model, gathered = _model_and_batch(gather=True)
    gathered_model.load_state_dict(model.state_dict())
    assert "vectors" in gathered["tokens"]["fasttext"]
    assert "vectors" not in tensors["tokens"]["fasttext"]  # old configs: unchanged batches
    torch.testing.assert_close(
        gathered["tokens"]["fasttext"]["subword_ids"], tensors["tokens"]["fasttext"]["subword_ids"]
    )
    model.eval()
    gathered_model.eval()
    expected = model(**tensors)
    # The whole forward and backward: no table read, no host read but the packing plan's.
    with _NoTableReads(monkeypatch, allowed={"pack_by_length"}):
        output = gathered_model(**gathered)
        output["loss"].backward()
    for key in ("loss", "forward_loss", "backward_loss", "forward_cosine"):
        torch.testing.assert_close(output[key], expected[key], rtol=1e-5, atol=1e-6)
    # Same metrics as before, read after the step.
    expected_metrics = model.get_metrics()
    for name, value in gathered_model.get_metrics().items():
        assert isinstance(value, float)
        assert value == pytest.approx(expected_metrics[name], rel=1e-5, abs=1e-6), name


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.tolist(),
        lambda t: int(t.sum()),
        lambda t: bool(t.any()),
        lambda t: t.cpu(),
        lambda t: t.nonzero(),
        lambda t: torch.nonzero(t),
        lambda t: t.sum().item(),
        lambda t: float(t.sum()),
    ],
    ids=["tolist", "int", "if_any", "cpu", "nonzero", "torch.nonzero", "item", "float"],
)
def test_every_kind_of_host_read_is_caught(monkeypatch, read):
    with _NoTableReads(monkeypatch), pytest.raises(AssertionError, match="host-side read"):
        read(torch.ones(3))


def test_a_training_step_and_allennlps_metric_read_make_no_host_read(monkeypatch):
    # Train mode, as allennlp runs it: forward (training-only branches: retrieval sampling,
    # recurrent dropout), backward, and the per-step get_metrics() the trainer calls.
    params = _params(gather=True)
    params["model"]["contextualizer"]["recurrent_dropout"] = 0.3
    params["model"]["retrieval_sample_size"] = 3  # exercise the sampled branch
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    instances = list(reader.read(LM_CORPUS / "valid.txt"))
    model = Model.from_params(vocab=Vocabulary(), params=params.pop("model"))
    batch = Batch(instances)
    batch.index_instances(Vocabulary())
    tensors = batch.as_tensor_dict()
    model.train()
    # The one known read: the encoder's packing plan, one copy of the step sizes per batch.
    with _NoTableReads(monkeypatch, allowed={"pack_by_length"}) as guard:
        for _ in range(2):
            output = model(**tensors)
            output["loss"].backward()
            assert model.get_metrics() == {}
    assert guard.allowed_reads == 2
    metrics = model.get_metrics(reset=True)  # read once, when logged at the end of the epoch
    assert metrics["forward_loss"] > 0 and 0.0 <= metrics["retrieval_accuracy"] <= 1.0


def test_without_the_gather_the_forward_reads_the_table(monkeypatch):
    # The check above can fail: the model's own lookup is caught.
    model, tensors = _model_and_batch(gather=False)
    with _NoTableReads(monkeypatch), pytest.raises(AssertionError, match="host-side read"):
        model(**tensors)


def test_gather_happens_in_loader_workers():
    params = _params(gather=True)
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    loader = MultiProcessDataLoader(
        reader, str(LM_CORPUS / "valid.txt"), batch_size=4, num_workers=1
    )
    loader.index_with(Vocabulary())
    serial_reader = DatasetReader.from_params(_params(gather=False).pop("dataset_reader"))
    instances = list(serial_reader.read(LM_CORPUS / "valid.txt"))[:4]
    batch = Batch(instances)
    batch.index_instances(Vocabulary())
    subword_ids = batch.as_tensor_dict()["tokens"]["fasttext"]["subword_ids"]
    embedder = Model.from_params(
        vocab=Vocabulary(), params=_params(gather=False).pop("model")
    )._text_field_embedder._token_embedders["fasttext"]
    first = next(iter(loader))["tokens"]["fasttext"]
    mask = first["mask"]
    torch.testing.assert_close(first["vectors"], embedder(subword_ids, mask), rtol=1e-5, atol=1e-6)
    assert (first["vectors"][~mask] == 0).all()


def test_device_average_matches_average():
    values = [torch.tensor(0.25), torch.tensor(1.5), torch.tensor(-2.0, dtype=torch.float16)]
    device_average, average = DeviceAverage(), Average()
    for value in values:
        device_average(value)
        average(value.item())
    assert device_average.get_metric() == pytest.approx(average.get_metric())
    assert device_average.get_metric(reset=True) == pytest.approx(-0.25 / 3)
    assert device_average.get_metric() == 0.0
    copied = copy.deepcopy(device_average)  # checkpoints may copy metrics
    copied(torch.tensor(2.0))
    assert copied.get_metric() == 2.0 and device_average.get_metric() == 0.0


def test_retrieval_accuracy_counts_repeated_targets_as_one_candidate():
    model, _ = _model_and_batch(gather=False)
    model.eval()
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8]])
    predictions = torch.tensor([[2.0, 0.1], [0.1, 2.0], [0.0, 1.0], [0.6, 0.8]])
    accuracy = model._retrieval_accuracy_of(predictions, targets)
    assert isinstance(accuracy, torch.Tensor) and accuracy.dim() == 0
    # Row 2 predicts [0, 1]'s direction but its target is [1, 0]: 3 of 4 right.
    assert accuracy.item() == pytest.approx(0.75)
