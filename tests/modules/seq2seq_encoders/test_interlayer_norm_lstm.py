"""The interlayer-norm variant: nn.LSTM(proj_size) per layer, LayerNorm between layers."""
import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmoc_allennlp.modules.seq2seq_encoders.interlayer_norm_lstm import InterLayerNormLstm, reverse_within_lengths

INPUT_DIM, PROJ, CELL = 5, 4, 7


def expected_layers(encoder: InterLayerNormLstm, sequence: torch.Tensor) -> torch.Tensor:
    """The layers of one unpadded `(timesteps, input_dim)` sequence, written out."""
    x = encoder.input_projection(sequence)
    if encoder.input_layer_norm is not None:
        x = encoder.input_layer_norm(x)
    layers = [torch.cat([x, x], -1)]
    forward = backward = x
    for index in range(encoder.num_layers):
        new_forward = encoder.forward_layers[index](forward.unsqueeze(0))[0][0]
        # Right to left: run on the reversed sequence, reverse the outputs back.
        new_backward = encoder.backward_layers[index](backward.flip(0).unsqueeze(0))[0][0].flip(0)
        if encoder.forward_layer_norms is not None:
            new_forward = encoder.forward_layer_norms[index](new_forward)
            new_backward = encoder.backward_layer_norms[index](new_backward)
        if index:
            new_forward, new_backward = new_forward + forward, new_backward + backward
        forward, backward = new_forward, new_backward
        layers.append(torch.cat([forward, backward], -1))
    return torch.stack(layers)


@pytest.mark.parametrize("layer_norm", [True, False])
def test_matches_per_sequence_computation_with_padding(layer_norm):
    torch.manual_seed(0)
    encoder = InterLayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=3, layer_norm=layer_norm)
    lengths = [5, 2, 0, 4]
    inputs = 10.0 * torch.randn(4, 6, INPUT_DIM)  # large values in the padding too
    mask = torch.arange(6).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    layers = encoder.forward_all_layers(inputs, mask)
    assert layers.shape == (4, 4, 6, 2 * PROJ)
    for b, length in enumerate(lengths):
        if length:
            torch.testing.assert_close(
                layers[:, b, :length], expected_layers(encoder, inputs[b, :length]),
                atol=1e-5, rtol=1e-5,
            )
    assert (layers[:, ~mask] == 0).all()
    # forward() runs the same operations on the same shapes: equal exactly.
    torch.testing.assert_close(encoder(inputs, mask), layers[-1], atol=0, rtol=0)
    # Without padding (the unpacked path) the same.
    full = encoder.forward_all_layers(inputs[:1, :5])
    torch.testing.assert_close(full[:, 0], layers[:, 0, :5], atol=1e-5, rtol=1e-5)


def test_layer_norm_is_outside_the_recurrence():
    """The state fed back is the raw LSTM output: LayerNorm-ing it afterwards is not ELMo-C."""
    torch.manual_seed(1)
    encoder = InterLayerNormLstm(INPUT_DIM, PROJ, CELL, num_layers=1)
    x = torch.randn(1, 3, INPUT_DIM)
    raw, _ = encoder.forward_layers[0](encoder.input_layer_norm(encoder.input_projection(x)))
    torch.testing.assert_close(
        encoder(x)[..., :PROJ], encoder.forward_layer_norms[0](raw), atol=1e-6, rtol=1e-6
    )


def test_reverse_within_lengths():
    x = torch.arange(8.0).view(2, 4, 1)
    reversed_ = reverse_within_lengths(x, torch.tensor([3, 4]))
    assert reversed_.view(2, 4).tolist() == [[2, 1, 0, 3], [7, 6, 5, 4]]
    assert torch.equal(reverse_within_lengths(reversed_, torch.tensor([3, 4])), x)


def test_from_params_gradients_and_errors():
    encoder = Seq2SeqEncoder.from_params(
        Params(
            {
                "type": "elmoc_interlayer_norm_lstm",
                "input_dim": INPUT_DIM,
                "projection_dim": PROJ,
                "cell_dim": CELL,
                "num_layers": 2,
            }
        )
    )
    assert isinstance(encoder, InterLayerNormLstm)
    assert encoder.get_output_dim() == 2 * PROJ and encoder.is_bidirectional()
    mask = torch.tensor([[True, True, True], [True, False, False]])
    outputs = encoder(torch.randn(2, 3, INPUT_DIM), mask)
    (outputs * torch.randn_like(outputs)).sum().backward()
    for name, parameter in encoder.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match="padding at the end"):
        encoder(torch.randn(1, 3, INPUT_DIM), torch.tensor([[True, False, True]]))
    with pytest.raises(ConfigurationError, match="cell_dim"):
        InterLayerNormLstm(INPUT_DIM, PROJ, 0)
