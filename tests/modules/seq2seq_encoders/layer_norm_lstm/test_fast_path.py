"""The fast path of `elmoc_lstm` computes what the reference path computes."""

import logging
from typing import Dict, List

import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmoc_allennlp.common import torch_versions
from elmoc_allennlp.modules.seq2seq_encoders import layer_norm_lstm
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import (
    LayerNormLstm,
    LayerNormLstmLayer,
)

INPUT_DIM, PROJ, CELL = 7, 6, 11


@pytest.fixture(autouse=True)
def restore_thread_count():
    """Tests of concurrent directions set the thread count themselves; the suite's is restored."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def lengths_to_mask(lengths: List[int], total: int) -> torch.BoolTensor:
    return torch.arange(total).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def randomize(module: torch.nn.Module) -> None:
    """Non-trivial LayerNorm parameters and biases, and states large enough to be clipped."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, torch.nn.LayerNorm):
                sub.weight.normal_(1.0, 0.3)
                sub.bias.normal_(0.0, 0.3)
            if isinstance(sub, LayerNormLstmLayer):
                sub.state_linearity.bias.normal_(0.0, 0.5)
                sub.state_projection.weight.mul_(4.0)


def run(module, implementation: str, inputs, mask, seed: int = 0, layers: bool = False):
    """Outputs and the gradients of the inputs and of every parameter (in the inputs' dtype)."""
    module.to(inputs.dtype)
    module.implementation = implementation
    module.zero_grad()
    inputs = inputs.detach().clone().requires_grad_()
    torch.manual_seed(seed)  # the same recurrent dropout masks for every implementation
    if layers:
        outputs = module.forward_all_layers(inputs, mask)
    else:
        outputs = module(inputs, mask)
    weights = torch.randn(outputs.shape, generator=torch.Generator().manual_seed(seed + 1))
    (outputs * weights.to(outputs.dtype)).sum().backward()
    grads: Dict[str, torch.Tensor] = {"inputs": inputs.grad}
    for name, parameter in module.named_parameters():
        grads[name] = parameter.grad.clone()
    return outputs.detach(), grads


def assert_same(first, second, tolerance=1e-10):
    """
    Outputs and gradients equal up to `tolerance` times the largest element of each tensor:
    float64 rounding (the default), or float32 rounding with `tolerance=1e-4`.
    """
    (outputs_a, grads_a), (outputs_b, grads_b) = first, second
    assert grads_a.keys() == grads_b.keys()
    for name, a, b in [("outputs", outputs_a, outputs_b)] + [
        (name, grads_a[name], grads_b[name]) for name in grads_a
    ]:
        scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
        torch.testing.assert_close(a, b, atol=tolerance * scale, rtol=0, msg=name)


# ---------------------------------------------------------------- one layer


@pytest.mark.parametrize("go_forward", [True, False])
@pytest.mark.parametrize(
    "lengths,total", [([5, 5, 5], 5), ([6, 3, 1, 5], 6), ([2, 7, 0, 4, 7], 8), ([0, 0], 3)]
)
@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_layer_fast_equals_reference(go_forward, lengths, total, dropout):
    torch.manual_seed(1)
    layer = LayerNormLstmLayer(
        INPUT_DIM, PROJ, CELL, go_forward=go_forward, recurrent_dropout=dropout
    )
    randomize(layer)
    layer.train()
    inputs = 2.0 * torch.randn(len(lengths), total, INPUT_DIM, dtype=torch.float64)
    mask = lengths_to_mask(lengths, total)
    reference = run(layer, "reference", inputs, mask)
    fast = run(layer, "auto", inputs, mask)
    assert_same(fast, reference)
    assert (fast[0][~mask] == 0).all()
    if dropout and mask.any():
        # The dropout masks were applied (and are the same as the reference's).
        assert (fast[0][mask] == 0).any()
    # In float32, to float32 rounding.
    assert_same(
        run(layer, "auto", inputs.float(), mask),
        run(layer, "reference", inputs.float(), mask),
        tolerance=1e-4,
    )


@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("clips", [(3.0, 3.0), (None, None), (0.5, 0.2)])
def test_layer_fast_equals_reference_with_and_without_norm_and_clips(layer_norm, clips):
    torch.manual_seed(2)
    cell_clip, projection_clip = clips
    layer = LayerNormLstmLayer(
        INPUT_DIM,
        PROJ,
        CELL,
        layer_norm=layer_norm,
        cell_clip=cell_clip,
        projection_clip=projection_clip,
    )
    randomize(layer)
    with torch.no_grad():
        # A saturated forget gate lets the memory grow past the cell clip.
        layer.state_linearity.bias[CELL : 2 * CELL] = 4.0
    # float64: with clipping, float32 rounding can move a value across a clip boundary,
    # which changes its gradient from 0 to non-zero (in any two implementations).
    inputs = 3.0 * torch.randn(3, 1, INPUT_DIM, dtype=torch.float64) + torch.randn(
        3, 6, INPUT_DIM, dtype=torch.float64
    )
    mask = lengths_to_mask([6, 4, 5], 6)
    reference = run(layer, "reference", inputs, mask)
    assert_same(run(layer, "auto", inputs, mask), reference)
    if projection_clip == 0.2 and not layer_norm:
        # The clip was active (and its gradient matched).
        assert reference[0][mask].abs().max() == projection_clip


@pytest.mark.parametrize("go_forward", [True, False])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_fast_layer_gradcheck(go_forward, dropout):
    """Gradients of the inputs and of every parameter against finite differences (float64)."""
    torch.manual_seed(3)
    layer = LayerNormLstmLayer(
        3,
        2,
        4,
        go_forward=go_forward,
        cell_clip=None,
        projection_clip=None,
        recurrent_dropout=dropout,
        implementation="auto",
    )
    randomize(layer)
    layer.double().train()
    mask = lengths_to_mask([3, 1, 2], 3)
    inputs = torch.randn(3, 3, 3, dtype=torch.float64, requires_grad=True)
    names = [name for name, _ in layer.named_parameters()]
    values = [parameter.detach().clone().requires_grad_() for parameter in layer.parameters()]

    def function(x, *parameters):
        torch.manual_seed(0)  # the same dropout mask at every evaluation
        return torch_versions.functional_call(layer, dict(zip(names, parameters)), (x, mask))

    assert torch.autograd.gradcheck(function, (inputs, *values), fast_mode=True)


# ---------------------------------------------------------------- the encoder


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_encoder_fast_equals_reference(parallel, dropout):
    torch.set_num_threads(2 if parallel else 1)  # directions run concurrently with >= 2
    torch.manual_seed(4)
    encoder = LayerNormLstm(
        INPUT_DIM,
        PROJ,
        CELL,
        num_layers=2,
        recurrent_dropout=dropout,
        parallel_directions=parallel,
    )
    encoder.train()
    inputs = torch.randn(5, 7, INPUT_DIM)
    mask = lengths_to_mask([7, 2, 0, 5, 6], 7)
    # float32 at the default initialisation...
    reference = run(encoder, "reference", inputs, mask, layers=True)
    fast = run(encoder, "auto", inputs, mask, layers=True)
    assert_same(fast, reference, tolerance=1e-4)
    assert fast[0].shape == (3, 5, 7, 2 * PROJ)
    assert (fast[0][:, ~mask] == 0).all()
    # forward() is the top layer of forward_all_layers().
    top = run(encoder, "auto", inputs, mask)
    torch.testing.assert_close(top[0], fast[0][-1], atol=1e-6, rtol=1e-6)
    # ...and float64 with larger states (clipping active) and random LayerNorm parameters.
    randomize(encoder)
    inputs = inputs.double()
    assert_same(
        run(encoder, "auto", inputs, mask, layers=True),
        run(encoder, "reference", inputs, mask, layers=True),
    )


def test_parallel_directions_equal_sequential():
    torch.set_num_threads(2)
    assert layer_norm_lstm._CONCURRENT.is_concurrent(2)
    torch.manual_seed(5)
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=2, recurrent_dropout=0.2)
    encoder.train()
    inputs = torch.randn(4, 6, INPUT_DIM)
    mask = lengths_to_mask([6, 5, 3, 6], 6)
    encoder.parallel_directions = True
    parallel = run(encoder, "auto", inputs, mask, layers=True)
    encoder.parallel_directions = False
    sequential = run(encoder, "auto", inputs, mask, layers=True)
    assert_same(parallel, sequential, tolerance=1e-5)


def test_eval_mode_and_no_grad():
    torch.manual_seed(6)
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL, recurrent_dropout=0.5)
    encoder.eval()
    inputs = torch.randn(3, 5, INPUT_DIM)
    mask = lengths_to_mask([5, 2, 4], 5)
    encoder.implementation = "reference"
    expected = encoder.forward_all_layers(inputs, mask)
    encoder.implementation = "auto"
    with torch.no_grad():
        torch.testing.assert_close(
            encoder.forward_all_layers(inputs, mask), expected, atol=1e-5, rtol=1e-5
        )


def test_mask_with_inner_padding_uses_reference_path(caplog):
    torch.manual_seed(7)
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL)
    inputs = torch.randn(2, 5, INPUT_DIM)
    mask = torch.tensor([[True, False, True, True, False], [True] * 5])
    encoder.implementation = "reference"
    expected = encoder(inputs, mask)
    encoder.implementation = "auto"
    layer_norm_lstm._warned_not_prefix = False
    with caplog.at_level(logging.WARNING, logger=layer_norm_lstm.__name__):
        result = encoder(inputs, mask)
    assert torch.equal(result, expected)
    assert "padding at the end" in caplog.text


def test_float64_and_implementation_attribute():
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=2, implementation="reference")
    assert encoder.implementation == "reference"
    assert all(
        layer.implementation == "reference"
        for layer in list(encoder.forward_layers) + list(encoder.backward_layers)
    )
    with pytest.raises(ConfigurationError, match="implementation"):
        encoder.implementation = "fastest"
    assert encoder.implementation == "reference"

    encoder.double()
    inputs = torch.randn(2, 4, INPUT_DIM, dtype=torch.float64)
    mask = lengths_to_mask([4, 3], 4)
    expected = encoder(inputs, mask)
    encoder.implementation = "auto"
    assert encoder.forward_layers[1].implementation == "auto"
    torch.testing.assert_close(encoder(inputs, mask), expected, atol=1e-12, rtol=1e-10)


def test_from_params_implementation_and_errors():
    params = {
        "type": "elmoc_lstm",
        "input_dim": INPUT_DIM,
        "projection_dim": PROJ,
        "cell_dim": CELL,
    }
    encoder = Seq2SeqEncoder.from_params(Params(dict(params, implementation="reference")))
    assert encoder.implementation == "reference"
    encoder = Seq2SeqEncoder.from_params(Params(dict(params, parallel_directions=False)))
    assert encoder.implementation == "auto" and encoder.parallel_directions is False
    with pytest.raises(ConfigurationError, match="implementation"):
        Seq2SeqEncoder.from_params(Params(dict(params, implementation="cudnn")))
    with pytest.raises(ConfigurationError, match="implementation"):
        LayerNormLstmLayer(INPUT_DIM, PROJ, CELL, implementation="")


def test_state_dicts_are_shared_by_all_implementations():
    torch.manual_seed(8)
    reference = LayerNormLstm(INPUT_DIM, PROJ, CELL, implementation="reference")
    fast = LayerNormLstm(INPUT_DIM, PROJ, CELL, implementation="auto")
    assert reference.state_dict().keys() == fast.state_dict().keys()
    fast.load_state_dict(reference.state_dict(), strict=True)
    inputs = torch.randn(2, 4, INPUT_DIM)
    torch.testing.assert_close(fast(inputs), reference(inputs), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- training


class TinyContinuousLm(torch.nn.Module):
    """An ELMo-C in miniature: the encoder and a linear output trained with the cosine loss."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.encoder = LayerNormLstm(dim, 6, 12, num_layers=2, recurrent_dropout=0.1)
        self.output = torch.nn.Linear(6, dim)

    def loss(self, vectors: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        forward, backward = self.encoder(vectors, mask).chunk(2, dim=-1)
        pairs = mask[:, :-1] & mask[:, 1:]
        losses = []
        directions = ((forward[:, :-1], vectors[:, 1:]), (backward[:, 1:], vectors[:, :-1]))
        for states, targets in directions:
            cosine = torch.nn.functional.cosine_similarity(
                self.output(states[pairs]), targets[pairs], dim=-1
            )
            losses.append((1 - cosine).mean())
        return 0.5 * (losses[0] + losses[1])


def train_curve(implementation: str, steps: int) -> List[float]:
    torch.manual_seed(9)
    model = TinyContinuousLm()
    model.encoder.implementation = implementation
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    # A fixed "vocabulary" of 20 word vectors and a fixed stream of random sentences.
    words = torch.randn(20, 8, generator=torch.Generator().manual_seed(10))
    data = torch.Generator().manual_seed(11)
    curve = []
    for _ in range(steps):
        lengths = torch.randint(2, 9, (6,), generator=data)
        # Mostly "next word = previous word + 1": something to learn.
        start = torch.randint(0, 20, (6, 1), generator=data)
        noise = torch.randint(0, 20, (6, 8), generator=data)
        ids = torch.where(
            torch.rand(6, 8, generator=data) < 0.2, noise, (start + torch.arange(8)) % 20
        )
        mask = torch.arange(8).unsqueeze(0) < lengths.unsqueeze(1)
        loss = model.loss(words[ids], mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    return curve


def test_training_loss_curve_matches_reference():
    """
    Training with the fast path follows the reference implementation's loss curve.

    Slow (~7 s): 200 real Adam steps of a tiny language model, once per implementation, because
    the curves must be compared over enough steps to show learning and float32 drift.
    """
    steps = 200
    reference = torch.tensor(train_curve("reference", steps))
    fast = torch.tensor(train_curve("auto", steps))
    # It learned something.
    assert reference[-25:].mean() < 0.75 * reference[:25].mean()
    # Step by step the same at first; float32 rounding differences then grow (as between any
    # two float32 implementations of the same model), so later compare 25-step averages.
    torch.testing.assert_close(fast[:50], reference[:50], atol=1e-3, rtol=0)
    windows = reference.view(-1, 25).mean(1), fast.view(-1, 25).mean(1)
    torch.testing.assert_close(windows[1], windows[0], atol=0, rtol=0.02)


def test_training_loss_curve_matches_reference_exactly_in_float64():
    torch.set_default_dtype(torch.float64)
    try:
        reference = torch.tensor(train_curve("reference", 30))
        fast = torch.tensor(train_curve("auto", 30))
    finally:
        torch.set_default_dtype(torch.float32)
    torch.testing.assert_close(fast, reference, atol=1e-9, rtol=0)
