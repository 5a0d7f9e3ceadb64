"""
Joint biLM training is the authors' two LMs (Li et al. 2019, footnote 7; uclanlp/ELMO-C trains one
job per direction, each clipped at `other_stuff.clip`): step for step, the joint run's forward
and backward parameters equal those of a forward-only and a backward-only run.
"""

from typing import Dict, List

import pytest
import torch

from allennlp.common import Params
from allennlp.data import Vocabulary
from allennlp.data.data_loaders import SimpleDataLoader
from allennlp.data.dataset_readers import DatasetReader
from allennlp.models import Model
from allennlp.training import GradientDescentTrainer
from allennlp.training.callbacks import TrainerCallback

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.training.fast_recovery_trainer import FastRecoveryTrainer
from tests.conftest import FIXTURES_ROOT, LM_CORPUS

STEPS = 4
MAX_NORM = 0.05  # small enough that every step clips


class _Snapshots(TrainerCallback):
    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        self.states: List[Dict[str, torch.Tensor]] = []

    def on_batch(self, trainer, *args, is_training: bool, **kwargs) -> None:
        if is_training:
            self.states.append({n: p.detach().clone() for n, p in trainer.model.named_parameters()})


def _run(tmp_path, directions: str, initial_state, trainer_class=FastRecoveryTrainer):
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    instances = list(reader.read(str(LM_CORPUS / "train-00001-of-00002.txt")))[: 2 * STEPS]
    model_params = params.pop("model")
    model_params["contextualizer"]["recurrent_dropout"] = 0.0
    model_params["directions"] = directions
    model = Model.from_params(vocab=Vocabulary(), params=model_params)
    if initial_state is not None:
        model.load_state_dict(initial_state)
    loader = SimpleDataLoader(instances, batch_size=2, vocab=model.vocab)
    trainable = [p for p in model.parameters() if p.requires_grad]
    snapshots = _Snapshots(str(tmp_path))
    trainer_class(
        model,
        torch.optim.Adam(trainable, lr=0.05, eps=1e-6),
        loader,
        num_epochs=1,
        grad_norm=MAX_NORM,
        serialization_dir=str(tmp_path / directions / trainer_class.__name__),
        callbacks=[snapshots],
        run_confidence_checks=False,
    ).train()
    return model, snapshots.states


def test_joint_training_equals_two_single_direction_runs(tmp_path):
    # One initial state for every run.
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    torch.manual_seed(0)
    initial = Model.from_params(vocab=Vocabulary(), params=params.pop("model")).state_dict()

    joint_model, joint = _run(tmp_path, "both", initial)
    assert len(joint) == STEPS
    for direction in ("forward", "backward"):
        single_model, single = _run(tmp_path, direction, initial)
        names = [name for name, _ in joint_model.direction_parameters(direction)]
        assert names == [name for name, _ in single_model.direction_parameters(direction)]
        for step in range(STEPS):
            for name in names:
                moved = joint[step][name] - initial[name]
                assert moved.abs().max() > 0 or step == 0, name
                torch.testing.assert_close(
                    joint[step][name],
                    single[step][name],
                    rtol=1e-5,
                    atol=1e-6,
                    msg=f"{direction} {name}, step {step + 1}",
                )

    # The stock trainer clips both directions together: a different run (so the check above
    # can fail, and clipping is active).
    _, together = _run(tmp_path, "both", initial, trainer_class=GradientDescentTrainer)
    last = STEPS - 1
    assert (
        max((together[last][name] - joint[last][name]).abs().max().item() for name in joint[last])
        > 1e-3
    )


def test_directions_share_nothing_trainable_in_the_paper_layout():
    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    model = Model.from_params(vocab=Vocabulary(), params=params.pop("model"))
    forward = {name for name, _ in model.direction_parameters("forward")}
    backward = {name for name, _ in model.direction_parameters("backward")}
    assert forward and backward and not forward & backward
    assert forward | backward == {n for n, p in model.named_parameters() if p.requires_grad}
    with pytest.raises(Exception, match="direction"):
        list(model.direction_parameters("both"))
