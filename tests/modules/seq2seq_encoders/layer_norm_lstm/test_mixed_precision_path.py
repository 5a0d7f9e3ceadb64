"""
Mixed precision on the fast path (issue #51): under autocast its matrix products run in autocast's
dtype and its cells, states and LayerNorms in float32, with gradients as close to float32's as
torch's own autocast gets on the reference path.
"""

from typing import List, Tuple

import pytest
import torch

from elmoc_allennlp.common.torch_versions import (
    CPU_BF16_AUTOCAST_LAYER_NORM_BACKWARD,
    TORCH_VERSION,
)
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import LayerNormLstm
from elmoc_allennlp.modules.seq2seq_encoders.lstm_recurrence import (
    RecurrenceConfig,
    pack_by_length,
    recurrence_backward,
    recurrence_forward,
)
from tests.modules.seq2seq_encoders.layer_norm_lstm.test_fast_path import (
    lengths_to_mask,
    randomize,
)

P, C = 8, 12
# float16 matrix products on the CPU: torch 2.x.
LOW_DTYPES = [torch.bfloat16] + ([torch.float16] if TORCH_VERSION >= (2, 0) else [])


def _relative(value: torch.Tensor, reference: torch.Tensor) -> float:
    return ((value.double() - reference.double()).norm() / reference.double().norm()).item()


def _recurrence_arguments(dropout: bool) -> Tuple[RecurrenceConfig, List[torch.Tensor]]:
    torch.manual_seed(3)
    packing = pack_by_length(lengths_to_mask([6, 4, 4, 1], 6))
    config = RecurrenceConfig(packing.batch_sizes, packing.offsets, False, 3.0, 3.0, 1e-5)
    tensors = [
        torch.randn(packing.num_rows, P),
        torch.randn(4 * C, P) * 0.5,
        torch.randn(4 * C) * 0.5,
        torch.randn(4 * C, P) * 0.5,
        torch.randn(P, C) * 0.5,
        torch.randn(P) * 0.3 + 1.0,
        torch.randn(P) * 0.3,
        (torch.rand(packing.batch_size, P) > 0.3).float() / 0.7 if dropout else None,
    ]
    return config, tensors


@pytest.mark.parametrize("low", LOW_DTYPES)
@pytest.mark.parametrize("dropout", [False, True])
def test_mixed_recurrence_keeps_products_low_and_states_float32(low, dropout):
    """
    `recurrence_forward` / `recurrence_backward` with the inputs and three weights in `low`, the
    bias, LayerNorm and mask float32: the products' operands are kept in `low`, the cells, states
    and LayerNorm statistics in float32, each gradient in its argument's dtype; the results are
    those of float32 on the same (rounded) operands to `low`'s precision: the states within a few
    roundings, the gradients (rounded to `low` at each step's products, over six steps) within
    32 (up to 20 seen, torch 1.12; 14 on torch 2).
    """
    config, tensors = _recurrence_arguments(dropout)
    rounded = [
        t if t is None or i not in (0, 1, 3, 4) else t.to(low).float()
        for i, t in enumerate(tensors)
    ]
    mixed = [t if t is None or i not in (0, 1, 3, 4) else t.to(low) for i, t in enumerate(tensors)]
    expected, expected_saved = recurrence_forward(config, *rounded)
    outputs, saved = recurrence_forward(config, *mixed)

    assert outputs.dtype == torch.float32
    for name in ("inputs", "activations", "cell_outputs", "previous_states"):
        assert getattr(saved, name).dtype == low, name
    for name in ("cells", "projected", "means", "rstds"):
        assert getattr(saved, name).dtype == torch.float32, name
    eps = torch.finfo(low).eps
    assert _relative(outputs, expected) < 8 * eps
    assert not torch.equal(outputs, expected)  # the products did run in `low`

    grad_outputs = torch.randn_like(outputs)
    expected_grads = recurrence_backward(expected_saved, grad_outputs, config)
    grads = recurrence_backward(saved, grad_outputs, config)
    for index, (grad, expected_grad) in enumerate(zip(grads, expected_grads)):
        assert grad.dtype == mixed[index].dtype, index
        assert _relative(grad, expected_grad) < 32 * eps, index


def _encoder_results(encoder, inputs, mask, weights, autocast: bool):
    encoder.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        layers = encoder.forward_all_layers(inputs, mask)
    (layers * weights).sum().backward()  # outside autocast, as allennlp's trainer does
    return layers, [p.grad.clone() for p in encoder.parameters()]


@pytest.mark.parametrize("separate", [False, True])
def test_encoder_under_autocast_is_as_close_to_float32_as_torch_autocast(separate):
    """
    The whole encoder under bfloat16 autocast: float32 outputs and float32 gradients for float32
    weights; outputs and every gradient within 32 bfloat16 roundings of float32's (outputs 1-3
    seen; gradients up to 11 on torch 2, 27 on torch 1.12, whose bfloat16 products are coarser),
    and (torch 2: torch 1.12's CPU autocast cannot differentiate its layer_norm) as close as the
    reference path under torch's own autocast policy gets, within a factor of 2.
    """
    torch.manual_seed(11)
    encoder = LayerNormLstm(7, P, C, num_layers=2, separate_input_projections=separate)
    randomize(encoder)
    inputs = torch.randn(4, 6, 7)
    mask = lengths_to_mask([6, 3, 5, 1], 6)
    weights = torch.randn(3, 4, 6, 2 * P)

    expected, expected_grads = _encoder_results(encoder, inputs, mask, weights, autocast=False)
    layers, grads = _encoder_results(encoder, inputs, mask, weights, autocast=True)
    assert layers.dtype == torch.float32
    assert all(grad.dtype == torch.float32 for grad in grads)
    assert not torch.equal(layers, expected)
    eps = torch.finfo(torch.bfloat16).eps
    assert _relative(layers, expected) < 8 * eps
    assert all(
        _relative(grad, expected) < 32 * eps for grad, expected in zip(grads, expected_grads)
    )
    if not CPU_BF16_AUTOCAST_LAYER_NORM_BACKWARD:
        return
    encoder.implementation = "reference"
    torch_layers, torch_grads = _encoder_results(encoder, inputs, mask, weights, autocast=True)
    floor = 4 * eps
    assert _relative(layers, expected) < 2 * max(_relative(torch_layers.float(), expected), floor)
    for grad, torch_grad, expected_grad in zip(grads, torch_grads, expected_grads):
        assert _relative(grad, expected_grad) < 2 * max(_relative(torch_grad, expected_grad), floor)


def test_without_autocast_the_fast_path_stays_float32():
    """No autocast: the products run in the weights' float32 (inputs of another dtype take it)."""
    torch.manual_seed(5)
    encoder = LayerNormLstm(7, P, C, num_layers=2)
    inputs = torch.randn(2, 4, 7)
    mask = lengths_to_mask([4, 2], 4)
    expected = encoder(inputs, mask)
    assert expected.dtype == torch.float32
    torch.testing.assert_close(encoder(inputs.double(), mask), expected)
    encoder.implementation = "reference"
    torch.testing.assert_close(encoder(inputs, mask), expected, atol=1e-5, rtol=1e-5)
