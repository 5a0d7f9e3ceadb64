"""`elmoc_slanted_triangular`: which layer groups train in which epoch, also after `--recover`."""

import re
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmoc_allennlp.common import torch_versions
from elmoc_allennlp.finetune.gradual_unfreezing import RecoverableSlantedTriangular
from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel
from tests.finetune.test_layer_groups import GROUPS


def _base_state(archive: Path) -> Dict[str, torch.Tensor]:
    return {
        name: value.clone() for name, value in load_archive(str(archive)).model.state_dict().items()
    }


def _epoch_states(serialization_dir: Path) -> List[Dict[str, torch.Tensor]]:
    paths = sorted(
        serialization_dir.glob("model_state_e*_b0.th"),
        key=lambda path: int(re.search(r"_e(\d+)_", path.name).group(1)),
    )
    return [torch_versions.load_tensors(path) for path in paths]


def _changed_groups(before, after, groups) -> List[str]:
    changed = []
    for label, names in groups:
        differences = [(after[name] - before[name]).abs().max().item() for name in names]
        if max(differences) > 1e-7:
            changed.append(label)
        else:
            # A frozen group gets no gradient and no update: exactly its old values.
            assert all(torch.equal(after[name], before[name]) for name in names), label
    return changed


def test_gradual_unfreezing_trains_the_top_k_groups_in_epoch_k(base_archive, finetuned):
    archive, serialization_dir = finetuned
    groups = BidirectionalLanguageModel.layer_groups(list(_base_state(base_archive)))
    states = [_base_state(base_archive)] + _epoch_states(serialization_dir)
    assert len(states) == 5
    for epoch in range(4):
        changed = _changed_groups(states[epoch], states[epoch + 1], groups)
        # Epoch 1 trains the output layer, epoch 2 also layer 2, ..., epoch 4 all groups.
        assert changed == GROUPS[3 - epoch :], f"epoch {epoch + 1}"


def test_resumed_schedule_freezes_the_groups_of_its_epoch():
    def make():
        layers = [torch.nn.Linear(2, 2) for _ in range(4)]
        groups = [{"params": list(layer.parameters())} for layer in layers] + [{"params": []}]
        optimizer = torch.optim.Adam(groups, lr=1e-3)
        scheduler = RecoverableSlantedTriangular(
            optimizer,
            num_epochs=6,
            num_steps_per_epoch=3,
            gradual_unfreezing=True,
            discriminative_fine_tuning=True,
        )
        return scheduler

    first = make()
    assert first.trained_groups() == [False, False, False, True]
    batch = 0
    for epoch in range(2):
        for _ in range(3):
            batch += 1
            first.step_batch(batch)
        first.step()
    assert first.trained_groups() == [False, True, True, True]
    state = first.state_dict()

    resumed = make()  # as the trainer builds it: the first epoch's setting
    assert resumed.trained_groups() == [False, False, False, True]
    resumed.load_state_dict(state)
    assert resumed.trained_groups() == [False, True, True, True]
    assert resumed.get_values() == pytest.approx(first.get_values())


def test_gradual_unfreezing_without_layer_groups_is_a_configuration_error():
    optimizer = torch.optim.Adam(torch.nn.Linear(2, 2).parameters(), lr=1e-3)
    with pytest.raises(ConfigurationError, match="elmoc_bilm_layerwise"):
        RecoverableSlantedTriangular(optimizer, num_epochs=3, gradual_unfreezing=True)
