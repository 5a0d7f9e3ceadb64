"""
The inference path of `elmoc_lstm` (a biLM prepared for bfloat16 or int8): its linear maps called as
modules, so that quantized or bfloat16 ones run; with float32 modules it computes the fast path's
states, and a frozen biLM's fast path keeps nothing for a backward pass (the same states).
"""

import copy

import pytest
import torch

from elmoc_allennlp.common import precision
from elmoc_allennlp.common.precision import is_quantized, prepare_encoder
from elmoc_allennlp.modules.seq2seq_encoders import lstm_recurrence
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import LayerNormLstm

LENGTHS = [9, 7, 3, 1, 0]


def encoder_and_inputs(separate: bool = False):
    torch.manual_seed(0)
    encoder = LayerNormLstm(12, 8, 16, num_layers=2, separate_input_projections=separate).eval()
    with torch.no_grad():
        for layer in [*encoder.forward_layers, *encoder.backward_layers]:
            layer.state_linearity.bias.normal_(0.0, 0.5)
    inputs = torch.randn(len(LENGTHS), max(LENGTHS), 12)
    mask = torch.arange(max(LENGTHS)).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)
    return encoder, inputs, mask


def layers(encoder, inputs, mask):
    with torch.no_grad():
        return encoder.forward_all_layers(inputs, mask)


def cosine(a, b, mask):
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)[:, mask]


@pytest.mark.parametrize("separate", [False, True], ids=["shared", "separate"])
def test_with_float32_modules_it_computes_the_fast_paths_states(separate):
    encoder, inputs, mask = encoder_and_inputs(separate)
    expected = layers(encoder, inputs, mask)
    encoder.inference_input_dtype = torch.float32
    got = layers(encoder, inputs, mask)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert not got[:, ~mask].any()  # zero at padding


def test_int8_quantizes_every_linear_map_and_stays_close():
    encoder, inputs, mask = encoder_and_inputs()
    expected = layers(encoder, inputs, mask)
    quantized = copy.deepcopy(encoder)
    assert prepare_encoder(quantized, "int8", "cpu") == "int8"
    maps = [quantized.input_projection] + [
        getattr(layer, name)
        for layer in [*quantized.forward_layers, *quantized.backward_layers]
        for name in ("input_linearity", "state_linearity", "state_projection")
    ]
    assert all(is_quantized(module) for module in maps)
    got = layers(quantized, inputs, mask)
    assert got.dtype == torch.float32 and not torch.equal(got, expected)
    # Seen: min 0.997 (random weights).
    assert cosine(got, expected, mask).min() > 0.99


def test_bfloat16_runs_the_maps_in_bfloat16_and_stays_close(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    encoder, inputs, mask = encoder_and_inputs()
    expected = layers(encoder, inputs, mask)
    prepared = copy.deepcopy(encoder)
    assert prepare_encoder(prepared, "bfloat16", "cpu") == "bfloat16"
    seen = []
    for module in prepared.modules():
        if isinstance(module, torch.nn.Linear):
            assert module.weight.dtype == torch.bfloat16
            module.register_forward_pre_hook(lambda _, args: seen.append(args[0].dtype))
    got = layers(prepared, inputs, mask)
    assert seen and set(seen) == {torch.bfloat16}
    assert got.dtype == torch.float32
    # Seen: min 0.9999 (random weights).
    assert cosine(got, expected, mask).min() > 0.99


def test_an_empty_batch_gives_zeros():
    encoder, inputs, _ = encoder_and_inputs()
    prepare_encoder(encoder, "int8", "cpu")
    mask = torch.zeros(inputs.shape[:2], dtype=torch.bool)
    got = layers(encoder, inputs, mask)
    assert got.shape == (3, *inputs.shape[:2], 16) and not got.any()


def test_a_frozen_fast_path_keeps_nothing_for_backward_and_computes_the_same_states(monkeypatch):
    kept = []
    original = lstm_recurrence.recurrence_forward

    def spy(*args, for_backward=True):
        kept.append(for_backward)
        return original(*args, for_backward=for_backward)

    monkeypatch.setattr(lstm_recurrence, "recurrence_forward", spy)
    encoder, inputs, mask = encoder_and_inputs()
    trainable = layers(encoder, inputs, mask)  # parameters need gradients: kept for backward
    assert kept == [True] * 4
    for parameter in encoder.parameters():
        parameter.requires_grad_(False)
    frozen = layers(encoder, inputs, mask)
    assert kept[4:] == [False] * 4
    assert torch.equal(frozen, trainable)


@pytest.mark.parametrize("dtype", ["int8", "bfloat16"])
def test_a_prepared_encoder_saves_and_loads_as_its_float32_self(dtype, monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    encoder, inputs, mask = encoder_and_inputs()
    float_state = {key: value.clone() for key, value in encoder.state_dict().items()}
    prepared = copy.deepcopy(encoder)
    prepare_encoder(prepared, dtype, "cpu")
    expected = layers(prepared, inputs, mask)
    state = prepared.state_dict()
    assert state.keys() == float_state.keys()
    assert all(torch.equal(state[key], value) for key, value in float_state.items())

    # Into a float32 encoder: the float32 one it was prepared from.
    fresh, _, _ = encoder_and_inputs()
    with torch.no_grad():
        for parameter in fresh.parameters():
            parameter.zero_()
    fresh.load_state_dict(state)
    assert torch.equal(layers(fresh, inputs, mask), layers(encoder, inputs, mask))

    # Into a prepared encoder (a trainer restoring its best weights): prepared again from them.
    other = copy.deepcopy(encoder)
    with torch.no_grad():
        other.forward_layers[0].state_linearity.weight.mul_(0.5)
    prepare_encoder(other, dtype, "cpu")
    assert not torch.equal(layers(other, inputs, mask), expected)
    other.load_state_dict(state)
    assert torch.equal(layers(other, inputs, mask), expected)


def test_a_prepared_encoder_reports_a_missing_weight():
    encoder, _, _ = encoder_and_inputs()
    prepare_encoder(encoder, "int8", "cpu")
    state = encoder.state_dict()
    del state["forward_layers.1.state_projection.weight"]
    with pytest.raises(RuntimeError, match=r"forward_layers\.1\.state_projection\.weight"):
        encoder.load_state_dict(state)
