"""`elmoc_gradient_descent`: --recover skips completed epochs without reading their data."""

import json
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Instance
from allennlp.data.data_loaders import SimpleDataLoader
from allennlp.data.fields import TensorField
from allennlp.training import GradientDescentTrainer, Trainer
from allennlp.training.callbacks import ConsoleLoggerCallback, TrainerCallback

from elmoc_allennlp.training.atomic_checkpointer import AtomicCheckpointer
from elmoc_allennlp.training.fast_recovery_trainer import FastRecoveryTrainer
from elmoc_allennlp.training.rnmt_plus_learning_rate import RnmtPlusLearningRate
from tests.training.toy_models import ToyRegression

BATCHES_PER_EPOCH = 3
REPO_ROOT = Path(__file__).resolve().parents[3]


class _CountingLoader(SimpleDataLoader):
    """Counts the batches read from it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches_read = 0

    def __iter__(self):
        for batch in super().__iter__():
            self.batches_read += 1
            yield batch


class _Record(TrainerCallback):
    """Records the learning rate and the weight at every trained batch; can crash at one."""

    def __init__(self, serialization_dir: str, crash_at_batch: Optional[int] = None) -> None:
        super().__init__(serialization_dir)
        self.learning_rates: List[float] = []
        self.weights: List[float] = []
        self.crash_at_batch = crash_at_batch

    def on_batch(self, trainer, *args, is_training: bool, **kwargs) -> None:
        if not is_training:
            return
        self.learning_rates.append(trainer.optimizer.param_groups[0]["lr"])
        self.weights.append(trainer.model.linear.weight.item())
        if self.crash_at_batch is not None and len(self.weights) == self.crash_at_batch:
            raise KeyboardInterrupt("simulated crash")


def _train(
    serialization_dir,
    num_epochs: int,
    trainer_class=FastRecoveryTrainer,
    crash_at_batch: Optional[int] = None,
    save_every_num_batches: Optional[int] = None,
):
    torch.manual_seed(0)
    model = ToyRegression()
    instances = [
        Instance({"x": TensorField(torch.tensor([float(i)])), "y": TensorField(torch.ones(1))})
        for i in range(2 * BATCHES_PER_EPOCH)
    ]
    loader = _CountingLoader(instances, batch_size=2, vocab=model.vocab)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = RnmtPlusLearningRate(
        optimizer, warmup_steps=2, decay_start=4, decay_end=20, num_replicas=2
    )
    recorder = _Record(str(serialization_dir), crash_at_batch)
    trainer = trainer_class(
        model,
        optimizer,
        loader,
        num_epochs=num_epochs,
        serialization_dir=str(serialization_dir),
        checkpointer=AtomicCheckpointer(
            serialization_dir, save_every_num_batches=save_every_num_batches
        ),
        learning_rate_scheduler=scheduler,
        callbacks=[recorder],
    )
    try:
        trainer.train()
    except KeyboardInterrupt:
        pass
    return recorder, loader, scheduler


@pytest.mark.parametrize("trainer_class", [FastRecoveryTrainer, GradientDescentTrainer])
def test_recovery_after_completed_epochs(tmp_path, trainer_class):
    straight, straight_loader, _ = _train(tmp_path / "straight", num_epochs=3)
    assert straight_loader.batches_read == 3 * BATCHES_PER_EPOCH
    assert len(set(straight.learning_rates)) == 3 * BATCHES_PER_EPOCH

    _train(tmp_path / "resumed", num_epochs=2, trainer_class=trainer_class)
    resumed, loader, scheduler = _train(
        tmp_path / "resumed", num_epochs=3, trainer_class=trainer_class
    )
    # The same schedule and the same weights as the uninterrupted run.
    assert resumed.learning_rates == pytest.approx(straight.learning_rates[6:])
    assert resumed.weights == pytest.approx(straight.weights[6:])
    assert scheduler.last_epoch == 3 * BATCHES_PER_EPOCH
    # The stock trainer reads the two completed epochs again; this one does not.
    expected_reads = 1 if trainer_class is FastRecoveryTrainer else 3
    assert loader.batches_read == expected_reads * BATCHES_PER_EPOCH


def test_recovery_from_a_checkpoint_inside_an_epoch(tmp_path):
    straight, _, _ = _train(tmp_path / "straight", num_epochs=3)
    # A checkpoint every 2 batches of an epoch: the last one after batch 2 of epoch 1 (5 batches
    # in all); the crash comes at batch 6.
    crashed, _, _ = _train(
        tmp_path / "crashed", num_epochs=3, crash_at_batch=6, save_every_num_batches=2
    )
    assert len(crashed.weights) == 6
    resumed, loader, scheduler = _train(
        tmp_path / "crashed", num_epochs=3, save_every_num_batches=2
    )
    assert resumed.learning_rates == pytest.approx(straight.learning_rates[5:])
    assert resumed.weights == pytest.approx(straight.weights[5:])
    assert scheduler.last_epoch == 3 * BATCHES_PER_EPOCH
    # Epoch 0 is not read; epoch 1 is read whole (its first two batches skipped by reading).
    assert loader.batches_read == 2 * BATCHES_PER_EPOCH


def test_stock_checkpoints_are_recovered_the_stock_way(tmp_path):
    _train(tmp_path / "run", num_epochs=2, trainer_class=GradientDescentTrainer)
    resumed, loader, scheduler = _train(tmp_path / "run", num_epochs=3)
    assert loader.batches_read == 3 * BATCHES_PER_EPOCH
    assert scheduler.last_epoch == 3 * BATCHES_PER_EPOCH


def test_registered_and_built_from_params(tmp_path):
    model = ToyRegression()
    instances = [Instance({"x": TensorField(torch.tensor([1.0])), "y": TensorField(torch.ones(1))})]
    trainer = Trainer.from_params(
        params=Params(
            {
                "type": "elmoc_gradient_descent",
                "num_epochs": 1,
                "optimizer": {"type": "sgd", "lr": 0.1},
                "checkpointer": {"type": "elmoc_atomic"},
            }
        ),
        model=model,
        serialization_dir=str(tmp_path),
        data_loader=SimpleDataLoader(instances, batch_size=1, vocab=model.vocab),
    )
    assert isinstance(trainer, FastRecoveryTrainer)
    assert isinstance(trainer._checkpointer, AtomicCheckpointer)


def _tiny_trainer(tmp_path, **settings):
    model = ToyRegression()
    instances = [Instance({"x": TensorField(torch.tensor([1.0])), "y": TensorField(torch.ones(1))})]
    return Trainer.from_params(
        params=Params(
            {"type": "elmoc_gradient_descent", "optimizer": {"type": "sgd", "lr": 0.1}, **settings}
        ),
        model=model,
        serialization_dir=str(tmp_path),
        data_loader=SimpleDataLoader(instances, batch_size=1, vocab=model.vocab),
    )


def test_an_unknown_key_is_refused_naming_it_and_the_key_it_meant(tmp_path):
    with pytest.raises(ConfigurationError) as error:
        _tiny_trainer(tmp_path, num_epoch=1, grad_nrom=1.0)
    message = str(error.value)
    assert '"trainer.num_epoch"' in message and '"trainer.num_epochs"' in message
    assert '"trainer.grad_nrom"' in message and '"trainer.grad_norm"' in message
    # Every named parameter of allennlp's trainer is still accepted.
    trainer = _tiny_trainer(tmp_path, num_epochs=1, grad_norm=1.0, run_confidence_checks=False)
    assert trainer._num_epochs == 1 and trainer._grad_norm == 1.0


def test_allennlp_train_refuses_a_misspelt_trainer_key(tmp_path, monkeypatch):
    """`allennlp train` through allennlp's `main`, in this process: the error ends the command."""
    from allennlp.commands import main

    serialization_dir = tmp_path / "run"
    argv = [
        "allennlp",
        "train",
        str(REPO_ROOT / "tests/fixtures/elmoc_tiny.jsonnet"),
        "-s",
        str(serialization_dir),
        "-o",
        json.dumps({"trainer.num_epoch": 1}),
        "--include-package",
        "elmoc_allennlp",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(ConfigurationError) as refused:
        main(prog="allennlp")
    message = str(refused.value)
    assert '"trainer.num_epoch"' in message and '"trainer.num_epochs"' in message
    assert not (serialization_dir / "model.tar.gz").exists()
    assert not list(serialization_dir.glob("model_state_*"))


def test_only_a_console_logger_asked_for_logs_the_first_batch(tmp_path):
    def console_loggers(trainer):
        return [c for c in trainer._callbacks if isinstance(c, ConsoleLoggerCallback)]

    (default,) = console_loggers(_tiny_trainer(tmp_path / "default", num_epochs=1))
    assert default._should_log_inputs is False
    (asked,) = console_loggers(
        _tiny_trainer(
            tmp_path / "asked",
            num_epochs=1,
            callbacks=[{"type": "console_logger", "should_log_inputs": True}],
        )
    )
    assert asked._should_log_inputs is True


@pytest.mark.parametrize("grad_norm", [False, 100.0])
def test_each_direction_steps_on_the_gradient_of_its_own_loss(tmp_path, grad_norm):
    # The biLM's `loss` is the directions' mean; the trainer gives each direction's parameters
    # the gradient its own LM's loss has (what a single-direction run steps on).
    from allennlp.data import Vocabulary
    from allennlp.data.dataset_readers import DatasetReader
    from allennlp.models import Model

    from tests.conftest import FIXTURES_ROOT, LM_CORPUS

    params = Params.from_file(str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"))
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    instances = list(reader.read(str(LM_CORPUS / "valid.txt")))[:4]
    torch.manual_seed(0)
    model = Model.from_params(vocab=Vocabulary(), params=params.pop("model"))
    loader = SimpleDataLoader(instances, batch_size=4, vocab=model.vocab)
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainer = FastRecoveryTrainer(
        model,
        torch.optim.SGD(trainable, lr=0.1),
        loader,
        num_epochs=1,
        grad_norm=grad_norm,
        serialization_dir=str(tmp_path),
        run_confidence_checks=False,
    )
    batch = next(iter(loader))
    model.eval()  # no dropout: the same losses on every call
    expected = {}
    for direction in ("forward", "backward"):
        named = list(model.direction_parameters(direction))
        gradients = torch.autograd.grad(model(**batch)[f"{direction}_loss"], [p for _, p in named])
        expected.update({name: gradient for (name, _), gradient in zip(named, gradients)})
    model(**batch)["loss"].backward()
    trainer.rescale_gradients()
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            torch.testing.assert_close(parameter.grad, expected[name], msg=name)
