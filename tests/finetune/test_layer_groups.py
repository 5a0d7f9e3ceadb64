"""`elmoc_bilm_layerwise`: one parameter group per biLM layer, bottom to top, and the rates it gets."""

import pytest

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmoc_allennlp.common import torch_versions
from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel

# The tiny biLM (tests/fixtures/elmoc_tiny.jsonnet) has 2 LSTM layers: 4 groups.
GROUPS = ["layer 0", "layer 1", "layer 2", "output"]


def test_layer_groups_are_the_bilm_layers_bottom_to_top(base_archive):
    model = load_archive(str(base_archive)).model
    names = [name for name, _ in model.named_parameters()]
    groups = BidirectionalLanguageModel.layer_groups(names)
    assert [label for label, _ in groups] == GROUPS
    assert sorted(name for _, group in groups for name in group) == sorted(names)
    labels = {name: label for label, group in groups for name in group}
    assert labels["_contextualizer.input_projection.weight"] == "layer 0"
    assert labels["_contextualizer.forward_layers.0.input_linearity.weight"] == "layer 1"
    assert labels["_contextualizer.backward_layers.1.state_linearity.weight"] == "layer 2"
    assert labels["_output_layer.projection.weight"] == "output"
    with pytest.raises(ConfigurationError, match="not part of an 'elmoc_bilm' layer"):
        BidirectionalLanguageModel.layer_groups(names + ["_classifier.weight"])


def test_discriminative_learning_rates_divide_by_2_6_per_layer(finetuned):
    _, serialization_dir = finetuned
    for path in serialization_dir.glob("training_state_e*_b0.th"):
        state = torch_versions.load_trusted(path)
        rates = [group["lr"] for group in state["optimizer"]["param_groups"]]
        assert len(rates) == 5  # 4 layer groups and allennlp's empty default group
        for lower, upper in zip(rates[:3], rates[1:4]):
            assert upper / lower == pytest.approx(2.6, rel=1e-6)
        base_rates = state["learning_rate_scheduler"]["base_values"]
        assert base_rates[3] == pytest.approx(2e-3)
        assert base_rates[0] == pytest.approx(2e-3 / 2.6**3)
