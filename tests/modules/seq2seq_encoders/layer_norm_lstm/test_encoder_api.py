import math
from typing import List, Optional

import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.elmo_lstm import ElmoLstm
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import (
    LayerNormLstm,
    LayerNormLstmLayer,
)

INPUT_DIM, PROJ, CELL = 7, 5, 11


def lengths_to_mask(lengths: List[int], total: int) -> torch.BoolTensor:
    return torch.arange(total).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def reference_step(
    layer: LayerNormLstmLayer,
    x: torch.Tensor,
    state: torch.Tensor,
    memory: torch.Tensor,
    dropout_mask: Optional[torch.Tensor] = None,
):
    """One step of the recurrence written out gate by gate, for a single sequence."""
    C = layer.cell_dim
    w_in = layer.input_linearity.weight
    w_state, b_state = layer.state_linearity.weight, layer.state_linearity.bias

    def pre(k: int) -> torch.Tensor:
        rows = slice(k * C, (k + 1) * C)
        return w_in[rows] @ x + w_state[rows] @ state + b_state[rows]

    i, f = torch.sigmoid(pre(0)), torch.sigmoid(pre(1))
    g, o = torch.tanh(pre(2)), torch.sigmoid(pre(3))
    memory = i * g + f * memory
    if layer.cell_clip is not None:
        memory = memory.clamp(-layer.cell_clip, layer.cell_clip)
    state = layer.state_projection.weight @ (o * torch.tanh(memory))
    if layer.projection_clip is not None:
        state = state.clamp(-layer.projection_clip, layer.projection_clip)
    if layer.layer_norm is not None:
        ln = layer.layer_norm
        mean = state.mean()
        var = ((state - mean) ** 2).mean()
        state = (state - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias
    if dropout_mask is not None:
        state = state * dropout_mask
    return state, memory


def reference_layer(layer: LayerNormLstmLayer, sequence: torch.Tensor, dropout_mask=None):
    """Runs `reference_step` over one unpadded (timesteps, input_dim) sequence."""
    state = sequence.new_zeros(layer.projection_dim)
    memory = sequence.new_zeros(layer.cell_dim)
    steps = range(len(sequence)) if layer.go_forward else reversed(range(len(sequence)))
    outputs = [None] * len(sequence)
    for t in steps:
        state, memory = reference_step(layer, sequence[t], state, memory, dropout_mask)
        outputs[t] = state
    return torch.stack(outputs)


def scale_state_projections(module: torch.nn.Module, factor: float = 10.0) -> None:
    """Makes the raw projected states large compared to LayerNorm's eps (variance ~1 after)."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, LayerNormLstmLayer):
                sub.state_projection.weight.mul_(factor)


def randomize_layer_norms(module: torch.nn.Module) -> None:
    for sub in module.modules():
        if isinstance(sub, torch.nn.LayerNorm):
            sub.weight.data.normal_(1.0, 0.3)
            sub.bias.data.normal_(0.0, 0.3)


# ---------------------------------------------------------------- equivalence with allennlp


def copy_into_elmo_lstm(ours: LayerNormLstm, cell_clip, projection_clip) -> ElmoLstm:
    elmo = ElmoLstm(
        PROJ,
        PROJ,
        CELL,
        ours.num_layers,
        memory_cell_clip_value=cell_clip,
        state_projection_clip_value=projection_clip,
    )
    for mine, theirs in zip(
        list(ours.forward_layers) + list(ours.backward_layers),
        list(elmo.forward_layers) + list(elmo.backward_layers),
    ):
        assert mine.go_forward == theirs.go_forward
        # Parameter names are shared with LstmCellWithProjection.
        theirs.load_state_dict(mine.state_dict(), strict=True)
    return elmo


@pytest.mark.parametrize("lengths,total", [([6, 4, 2], 6), ([3, 5, 1, 0], 6)])
def test_matches_allennlp_elmo_lstm_without_layer_norm(lengths, total):
    torch.manual_seed(0)
    ours = LayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=2, layer_norm=False)
    with torch.no_grad():
        # Large weights and inputs so that both clips trigger.
        for layer in list(ours.forward_layers) + list(ours.backward_layers):
            layer.input_linearity.weight.mul_(3.0)
            layer.state_projection.weight.mul_(20.0)
            # A saturated forget gate lets the memory accumulate past the cell clip.
            layer.state_linearity.bias[CELL : 2 * CELL] = 5.0
    # Slowly varying inputs push the memory the same way at every step.
    inputs = 3.0 * torch.randn(len(lengths), 1, INPUT_DIM) + 0.3 * torch.randn(
        len(lengths), total, INPUT_DIM
    )
    mask = lengths_to_mask(lengths, total)

    ours_layers = ours.forward_all_layers(inputs, mask)
    elmo = copy_into_elmo_lstm(ours, 3.0, 3.0)
    elmo_layers = elmo(ours.input_projection(inputs), mask)

    assert ours_layers.shape == (3, len(lengths), total, 2 * PROJ)
    assert elmo_layers.shape == (2, len(lengths), total, 2 * PROJ)
    torch.testing.assert_close(ours_layers[1:], elmo_layers, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours(inputs, mask), elmo_layers[-1], atol=1e-5, rtol=1e-5)

    # The projection clip was hit in both directions of layer 1 (before the residual)...
    assert ours_layers[1, ..., :PROJ].abs().max() == 3.0
    assert ours_layers[1, ..., PROJ:].abs().max() == 3.0
    # ...and the cell clip changed the result.
    unclipped = LayerNormLstm(INPUT_DIM, PROJ, CELL, layer_norm=False, cell_clip=None)
    unclipped.load_state_dict(ours.state_dict())
    assert not torch.allclose(unclipped.forward_all_layers(inputs, mask)[1], ours_layers[1])


# ---------------------------------------------------------------- layer norm


@pytest.mark.parametrize("go_forward", [True, False])
def test_layer_norm_states_are_normalized(go_forward):
    torch.manual_seed(1)
    layer = LayerNormLstmLayer(INPUT_DIM, PROJ, CELL, go_forward=go_forward)
    scale_state_projections(layer)
    lengths = [6, 3, 1]
    mask = lengths_to_mask(lengths, 6)
    outputs = layer(5.0 * torch.randn(3, 6, INPUT_DIM), mask)
    real = outputs[mask]
    assert real.shape == (10, PROJ)
    torch.testing.assert_close(real.mean(-1), torch.zeros(10), atol=1e-5, rtol=0)
    torch.testing.assert_close(real.var(-1, unbiased=False), torch.ones(10), atol=1e-3, rtol=0)
    assert (outputs[~mask] == 0).all()


def test_encoder_layer_norms_input_and_first_layer():
    torch.manual_seed(2)
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL)
    scale_state_projections(encoder)
    mask = lengths_to_mask([6, 4, 2], 6)
    layers = encoder.forward_all_layers(10.0 * torch.randn(3, 6, INPUT_DIM) + 4.0, mask)
    # Layer 0 (projected input) and both halves of layer 1 (no residual) are normalized.
    for vectors in (layers[0, ..., :PROJ], layers[1, ..., :PROJ], layers[1, ..., PROJ:]):
        real = vectors[mask]
        torch.testing.assert_close(real.mean(-1), torch.zeros(12), atol=1e-5, rtol=0)
        torch.testing.assert_close(real.var(-1, unbiased=False), torch.ones(12), atol=1e-3, rtol=0)


@pytest.mark.parametrize("go_forward", [True, False])
def test_layer_matches_hand_unrolled_two_steps(go_forward):
    torch.manual_seed(3)
    layer = LayerNormLstmLayer(INPUT_DIM, PROJ, CELL, go_forward=go_forward)
    randomize_layer_norms(layer)
    with torch.no_grad():
        layer.state_linearity.bias.normal_()
    x = 2.0 * torch.randn(1, 2, INPUT_DIM)
    outputs = layer(x)

    first, second = (0, 1) if go_forward else (1, 0)
    state_1, memory_1 = reference_step(layer, x[0, first], torch.zeros(PROJ), torch.zeros(CELL))
    # The normalized state is what is fed back at the next step.
    state_2, _ = reference_step(layer, x[0, second], state_1, memory_1)
    torch.testing.assert_close(outputs[0, first], state_1, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outputs[0, second], state_2, atol=1e-5, rtol=1e-5)

    # Feeding back the un-normalized state instead would give a different second output.
    layer_norm, layer.layer_norm = layer.layer_norm, None
    raw_state_1, _ = reference_step(layer, x[0, first], torch.zeros(PROJ), torch.zeros(CELL))
    layer.layer_norm = layer_norm
    wrong_state_2, _ = reference_step(layer, x[0, second], raw_state_1, memory_1)
    assert not torch.allclose(wrong_state_2, state_2, atol=1e-3)


# ---------------------------------------------------------------- padding


@pytest.mark.parametrize("go_forward", [True, False])
def test_layer_matches_per_sequence_reference_with_padding(go_forward):
    torch.manual_seed(4)
    layer = LayerNormLstmLayer(INPUT_DIM, PROJ, CELL, go_forward=go_forward)
    randomize_layer_norms(layer)
    lengths = [4, 6, 0, 2]
    inputs = torch.randn(4, 6, INPUT_DIM)
    mask = lengths_to_mask(lengths, 6)
    outputs = layer(inputs, mask)
    for b, length in enumerate(lengths):
        if length:
            expected = reference_layer(layer, inputs[b, :length])
            torch.testing.assert_close(outputs[b, :length], expected, atol=1e-5, rtol=1e-5)
        assert (outputs[b, length:] == 0).all()


def test_encoder_outputs_are_invariant_to_padding_and_batch_mates():
    torch.manual_seed(5)
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=2)
    randomize_layer_norms(encoder)
    encoder.eval()
    sequence = torch.randn(4, INPUT_DIM)

    alone = encoder.forward_all_layers(sequence.unsqueeze(0), torch.ones(1, 4, dtype=torch.bool))

    # Padded longer, with garbage in the padding, next to different batch mates.
    inputs = 100.0 * torch.randn(3, 6, INPUT_DIM)
    inputs[1, :4] = sequence
    mask = lengths_to_mask([6, 4, 5], 6)
    batched = encoder.forward_all_layers(inputs, mask)
    torch.testing.assert_close(batched[:, 1, :4], alone[:, 0], atol=1e-6, rtol=1e-5)
    assert (batched[:, 1, 4:] == 0).all()
    assert (batched[:, 2, 5:] == 0).all()

    inputs[0] = torch.randn(6, INPUT_DIM)
    inputs[2] = torch.randn(6, INPUT_DIM)
    rebatched = encoder.forward_all_layers(inputs, lengths_to_mask([2, 4, 6], 6))
    torch.testing.assert_close(rebatched[:, 1], batched[:, 1], atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------- recurrent dropout


def test_eval_mode_ignores_dropout_and_train_without_dropout_equals_eval():
    torch.manual_seed(6)
    with_dropout = LayerNormLstm(INPUT_DIM, PROJ, CELL, recurrent_dropout=0.5)
    without = LayerNormLstm(INPUT_DIM, PROJ, CELL, recurrent_dropout=0.0)
    without.load_state_dict(with_dropout.state_dict())
    inputs = torch.randn(3, 6, INPUT_DIM)
    mask = lengths_to_mask([6, 3, 5], 6)

    with_dropout.eval()
    without.eval()
    first = with_dropout.forward_all_layers(inputs, mask)
    assert torch.equal(first, with_dropout.forward_all_layers(inputs, mask))
    assert torch.equal(first, without.forward_all_layers(inputs, mask))

    without.train()
    assert torch.equal(without.forward_all_layers(inputs, mask), first)

    with_dropout.train()
    assert not torch.allclose(with_dropout.forward_all_layers(inputs, mask), first)


@pytest.mark.parametrize("go_forward", [True, False])
def test_train_mode_dropout_uses_one_mask_per_sequence(go_forward):
    torch.manual_seed(7)
    proj, p = 16, 0.5
    layer = LayerNormLstmLayer(INPUT_DIM, proj, CELL, go_forward=go_forward, recurrent_dropout=p)
    layer.train()
    lengths = [6, 4, 5]
    inputs = torch.randn(3, 6, INPUT_DIM)
    outputs = layer(inputs, lengths_to_mask(lengths, 6))

    masks = []
    for b, length in enumerate(lengths):
        dropped = outputs[b, :length] == 0
        # The same units are zero at every time step.
        assert (dropped == dropped[0]).all()
        assert 0 < dropped[0].sum() < proj
        mask = (~dropped[0]).float() / (1 - p)
        masks.append(mask)
        # The dropped-out (and rescaled) state is the one fed back.
        expected = reference_layer(layer, inputs[b, :length], dropout_mask=mask)
        torch.testing.assert_close(outputs[b, :length], expected, atol=1e-5, rtol=1e-5)
    # Each sequence has its own mask.
    assert not (torch.equal(masks[0], masks[1]) and torch.equal(masks[1], masks[2]))


def test_encoder_dropout_reaches_every_layer():
    torch.manual_seed(8)
    encoder = LayerNormLstm(INPUT_DIM, 16, CELL, num_layers=2, recurrent_dropout=0.5)
    assert all(
        layer.recurrent_dropout == 0.5
        for layer in list(encoder.forward_layers) + list(encoder.backward_layers)
    )
    encoder.train()
    layers = encoder.forward_all_layers(torch.randn(2, 5, INPUT_DIM))
    for half in (layers[1, ..., :16], layers[1, ..., 16:]):
        dropped = half == 0
        assert (dropped == dropped[:, :1]).all() and dropped.any()


# ---------------------------------------------------------------- gradients and size


def test_gradients_reach_every_parameter():
    torch.manual_seed(9)
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=2, recurrent_dropout=0.2)
    encoder.train()
    mask = lengths_to_mask([6, 3, 5], 6)
    layers = encoder.forward_all_layers(torch.randn(3, 6, INPUT_DIM), mask)
    (layers * torch.randn_like(layers)).sum().backward()
    names = [name for name, _ in encoder.named_parameters()]
    assert (
        len(names) == 3 + 2 * 2 * 6
    )  # input projection (no bias) + layer norm; 6 per layer direction
    for name, parameter in encoder.named_parameters():
        assert parameter.grad is not None, name
        assert parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize("go_forward", [True, False])
def test_layer_gradcheck(go_forward):
    torch.manual_seed(10)
    layer = LayerNormLstmLayer(3, 2, 4, go_forward=go_forward, cell_clip=None, projection_clip=None)
    randomize_layer_norms(layer)
    layer.double()
    mask = lengths_to_mask([3, 2], 3)
    inputs = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x, mask), (inputs,))


def test_parameter_names_and_initialisation():
    torch.manual_seed(11)
    layer = LayerNormLstmLayer(INPUT_DIM, PROJ, CELL)
    assert set(dict(layer.named_parameters())) == {
        "input_linearity.weight",
        "state_linearity.weight",
        "state_linearity.bias",
        "state_projection.weight",
        "layer_norm.weight",
        "layer_norm.bias",
    }
    assert layer.input_linearity.weight.shape == (4 * CELL, INPUT_DIM)
    assert layer.state_linearity.weight.shape == (4 * CELL, PROJ)
    assert layer.state_projection.weight.shape == (PROJ, CELL)
    bias = layer.state_linearity.bias
    assert torch.equal(bias[CELL : 2 * CELL], torch.ones(CELL))
    assert torch.equal(torch.cat([bias[:CELL], bias[2 * CELL :]]), torch.zeros(3 * CELL))
    # Each gate block is orthogonal (cell_dim > input/projection dim: orthonormal columns).
    weights = ((layer.input_linearity.weight, INPUT_DIM), (layer.state_linearity.weight, PROJ))
    for weight, columns in weights:
        for block in weight.detach().split(CELL, dim=0):
            torch.testing.assert_close(block.t() @ block, torch.eye(columns), atol=1e-5, rtol=0)
    no_norm = LayerNormLstmLayer(INPUT_DIM, PROJ, CELL, layer_norm=False)
    assert no_norm.layer_norm is None and len(list(no_norm.parameters())) == 4


@pytest.mark.needs_meta_device
def test_parameter_count_at_paper_size():
    d, p, c, layers = 300, 512, 4096, 2
    with torch.device("meta"):
        encoder = LayerNormLstm(d, p, c, num_layers=layers, layer_norm=True)
    assert all(parameter.is_meta for parameter in encoder.parameters())
    per_layer_direction = (
        p * 4 * c  # input_linearity (input is the P-dim projection / previous layer)
        + p * 4 * c
        + 4 * c  # state_linearity
        + c * p  # state_projection
        + 2 * p  # layer_norm
    )
    expected = d * p + 2 * p + 2 * layers * per_layer_direction  # projection has no bias
    count = sum(parameter.numel() for parameter in encoder.parameters())
    assert count == expected == 75_721_728
    assert math.isclose(count / 1e6, 75.7, abs_tol=0.05)


# ---------------------------------------------------------------- API and configuration


def test_encoder_api_and_from_params():
    encoder = Seq2SeqEncoder.from_params(
        Params(
            {
                "type": "elmoc_lstm",
                "input_dim": INPUT_DIM,
                "projection_dim": PROJ,
                "cell_dim": CELL,
                "num_layers": 3,
                "layer_norm": False,
                "cell_clip": None,
                "projection_clip": 2.5,
                "recurrent_dropout": 0.1,
            }
        )
    )
    assert isinstance(encoder, LayerNormLstm)
    assert (encoder.get_input_dim(), encoder.get_output_dim()) == (INPUT_DIM, 2 * PROJ)
    assert encoder.is_bidirectional()
    assert (encoder.projection_dim, encoder.cell_dim, encoder.num_layers) == (PROJ, CELL, 3)
    assert encoder.input_layer_norm is None
    layer = encoder.backward_layers[2]
    assert not layer.go_forward and layer.layer_norm is None
    assert (layer.cell_clip, layer.projection_clip, layer.recurrent_dropout) == (None, 2.5, 0.1)

    encoder.eval()
    inputs = torch.randn(3, 6, INPUT_DIM)
    mask = lengths_to_mask([6, 2, 4], 6)
    all_layers = encoder.forward_all_layers(inputs, mask)
    assert all_layers.shape == (4, 3, 6, 2 * PROJ)
    top = encoder(inputs, mask)
    assert top.shape == (3, 6, 2 * PROJ)
    # The same operations on the same shapes: equal exactly.
    torch.testing.assert_close(top, all_layers[-1], atol=0, rtol=0)
    # Layer 0 is [x; x] for the projected input, zeroed at padding. The encoder projects packed
    # rows, a matrix of another shape than here, which BLAS may sum in another order: float32
    # rounding.
    x = encoder.input_projection(inputs) * mask.unsqueeze(-1)
    torch.testing.assert_close(all_layers[0], torch.cat([x, x], -1), atol=1e-6, rtol=1e-5)
    # No mask means every position is real (the same operations as an all-true mask).
    full = torch.ones(3, 6, dtype=torch.bool)
    torch.testing.assert_close(encoder(inputs), encoder(inputs, full), atol=0, rtol=0)


def test_residual_connections_from_layer_one():
    torch.manual_seed(12)
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=3)
    encoder.eval()
    mask = lengths_to_mask([6, 4], 6)
    layers = encoder.forward_all_layers(torch.randn(2, 6, INPUT_DIM), mask)
    for index in (1, 2):
        forward_layer = encoder.forward_layers[index]
        backward_layer = encoder.backward_layers[index]
        previous = layers[index]
        expected = torch.cat(
            [
                forward_layer(previous[..., :PROJ], mask) + previous[..., :PROJ],
                backward_layer(previous[..., PROJ:], mask) + previous[..., PROJ:],
            ],
            -1,
        )
        torch.testing.assert_close(layers[index + 1], expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"input_dim": 0}, "input_dim"),
        ({"projection_dim": -1}, "projection_dim"),
        ({"cell_dim": 0}, "cell_dim"),
        ({"num_layers": 0}, "num_layers"),
        ({"recurrent_dropout": 1.0}, "recurrent_dropout"),
        ({"recurrent_dropout": -0.1}, "recurrent_dropout"),
        ({"cell_clip": 0.0}, "cell_clip"),
        ({"projection_clip": -3.0}, "projection_clip"),
    ],
)
def test_bad_configuration_raises(overrides, message):
    kwargs = dict(input_dim=INPUT_DIM, projection_dim=PROJ, cell_dim=CELL)
    kwargs.update(overrides)
    with pytest.raises(ConfigurationError, match=message):
        LayerNormLstm(**kwargs)


def test_bad_inputs_raise_clear_errors():
    encoder = LayerNormLstm(INPUT_DIM, PROJ, CELL)
    with pytest.raises(ConfigurationError, match="inputs' last dimension must match input_dim"):
        encoder(torch.randn(2, 4, INPUT_DIM + 1), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must have shape"):
        encoder(torch.randn(2, 4, INPUT_DIM), torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="inputs must have shape"):
        encoder(torch.randn(4, INPUT_DIM), torch.ones(4, dtype=torch.bool))
    layer = LayerNormLstmLayer(INPUT_DIM, PROJ, CELL)
    with pytest.raises(ConfigurationError, match="inputs' last dimension must match input_dim"):
        layer(torch.randn(2, 4, PROJ))
