import io
import math
from typing import List

import pytest
import torch

from allennlp.common import Lazy, Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Instance
from allennlp.data.data_loaders import SimpleDataLoader
from allennlp.data.fields import TensorField
from allennlp.training import Checkpointer, GradientDescentTrainer
from allennlp.training.callbacks import TrainerCallback
from allennlp.training.learning_rate_schedulers import LearningRateScheduler
from allennlp.training.optimizers import SgdOptimizer

from elmoc_allennlp.training.fast_recovery_trainer import FastRecoveryTrainer
from elmoc_allennlp.training.rnmt_plus_learning_rate import RnmtPlusLearningRate
from elmoc_allennlp.common import torch_versions
from tests.training.toy_models import ToyRegression

LR0 = 0.5


def _optimizer(*learning_rates: float) -> torch.optim.Optimizer:
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in learning_rates]
    return torch.optim.SGD(groups, lr=learning_rates[0])


def _lr_at(scheduler: RnmtPlusLearningRate, step: int) -> float:
    scheduler.step_batch(step)
    return scheduler.optimizer.param_groups[0]["lr"]


# p = 100, s = 4000, e = 12000. With n = 1 the warm-up term is constantly 1, the decay runs over
# t in [4000, 12000]; with n = 4 the warm-up ends at t = n * p = 400 and the decay (in units of
# n * t) runs over t in [1000, 3000].
N1_EXPECTED = [
    (0, 1.0),
    (50, 1.0),  # mid-warm-up (flat for n = 1)
    (100, 1.0),  # end of warm-up
    (2000, 1.0),  # plateau
    (4000, 1.0),  # decay start: 1 * 2 ** 0
    (8000, 2**-0.5),  # midway
    (12000, 0.5),  # decay end: 1 * 2 ** -1
    (120000, 0.5),  # held
]
N4_EXPECTED = [
    (0, 1.0),
    (200, 2.5),  # 1 + 200 * 3 / 400
    (400, 4.0),  # end of warm-up
    (700, 4.0),  # plateau
    (1000, 4.0),  # n * t = s: 4 * 8 ** 0
    (1500, 4 * 8**-0.25),  # n * t = 6000
    (2000, 4 * 8**-0.5),  # midway
    (3000, 0.5),  # n * t = e: 4 * 8 ** -1
    (30000, 0.5),  # held
]


@pytest.mark.parametrize(
    "num_replicas, step, factor",
    [(1, t, f) for t, f in N1_EXPECTED] + [(4, t, f) for t, f in N4_EXPECTED],
)
def test_hand_computed_values(num_replicas, step, factor):
    scheduler = RnmtPlusLearningRate(
        _optimizer(LR0),
        warmup_steps=100,
        decay_start=4000,
        decay_end=12000,
        num_replicas=num_replicas,
    )
    assert _lr_at(scheduler, step) == pytest.approx(LR0 * factor, rel=1e-12)


def test_values_out_of_order_and_per_param_group():
    optimizer = _optimizer(1.0, 0.1)
    scheduler = RnmtPlusLearningRate(optimizer, 100, 4000, 12000, num_replicas=4)
    for step, factor in reversed(N4_EXPECTED):
        scheduler.step_batch(step)
        assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([factor, 0.1 * factor])


def test_construction_sets_lr_of_step_zero_and_no_warmup():
    optimizer = _optimizer(LR0)
    RnmtPlusLearningRate(
        optimizer, warmup_steps=0, decay_start=4000, decay_end=12000, num_replicas=4
    )
    assert optimizer.param_groups[0]["lr"] == pytest.approx(4 * LR0)


def test_floor_applies_per_group():
    optimizer = _optimizer(1.0, 0.1)
    scheduler = RnmtPlusLearningRate(optimizer, 0, 10, 20, min_learning_rate=0.3)
    scheduler.step_batch(15)  # factor 2 ** -0.5 = 0.707
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([2**-0.5, 0.3])
    scheduler.step_batch(1000)  # factor 0.5
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.5, 0.3])


@pytest.mark.parametrize("num_replicas, min_lr", [(1, 0.0), (4, 0.0), (4, 0.7)])
def test_whole_range_is_bounded_and_decreases_after_the_plateau(num_replicas, min_lr):
    warmup, start, end = 100, 4000, 12000
    scheduler = RnmtPlusLearningRate(
        _optimizer(LR0), warmup, start, end, num_replicas=num_replicas, min_learning_rate=min_lr
    )
    last_step = 3 * end // num_replicas
    values = [_lr_at(scheduler, t) for t in range(last_step + 1)]
    assert all(math.isfinite(v) and v > 0 for v in values)
    assert max(values) == pytest.approx(num_replicas * LR0)
    assert all(max(min_lr, 0.0) <= v <= num_replicas * LR0 for v in values)
    after_plateau = values[num_replicas * warmup :]
    assert all(b <= a for a, b in zip(after_plateau, after_plateau[1:]))
    assert values[-1] == pytest.approx(max(LR0 / 2, min_lr))


def test_huge_decay_exponent_does_not_overflow():
    # (2n) ** (s / (e - s)) would overflow a float before the decay starts.
    scheduler = RnmtPlusLearningRate(_optimizer(LR0), 0, 10**6, 10**6 + 1, num_replicas=8)
    assert _lr_at(scheduler, 0) == pytest.approx(8 * LR0)
    assert _lr_at(scheduler, 10**6 // 8 + 1) == pytest.approx(LR0 / 2)


def test_step_is_a_no_op_and_step_batch_without_argument_counts():
    optimizer = _optimizer(LR0)
    scheduler = RnmtPlusLearningRate(optimizer, 100, 4000, 12000, num_replicas=4)
    scheduler.step_batch(200)
    scheduler.step(metric=1.0)  # end of epoch
    assert scheduler.last_epoch == 200
    assert optimizer.param_groups[0]["lr"] == pytest.approx(LR0 * 2.5)
    scheduler.step_batch()
    assert scheduler.last_epoch == 201
    assert optimizer.param_groups[0]["lr"] == pytest.approx(LR0 * (1 + 201 * 3 / 400))


def test_state_dict_round_trip_through_a_checkpoint():
    scheduler = RnmtPlusLearningRate(_optimizer(LR0), 100, 4000, 12000, num_replicas=4)
    scheduler.step_batch(1500)
    buffer = io.BytesIO()
    torch.save({"learning_rate_scheduler": scheduler.state_dict()}, buffer)
    buffer.seek(0)
    state = torch_versions.load_tensors(buffer)["learning_rate_scheduler"]

    optimizer = _optimizer(LR0)  # a fresh optimizer at lr0
    restored = RnmtPlusLearningRate(optimizer, 100, 4000, 12000, num_replicas=4)
    restored.load_state_dict(state)
    assert restored.last_epoch == 1500
    assert optimizer.param_groups[0]["lr"] == pytest.approx(LR0 * 4 * 8**-0.25)
    restored.step_batch()
    scheduler.step_batch()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(
        scheduler.optimizer.param_groups[0]["lr"]
    )


def test_from_params():
    optimizer = _optimizer(LR0)
    scheduler = LearningRateScheduler.from_params(
        optimizer=optimizer,
        params=Params(
            {
                "type": "elmoc_rnmt_plus_steps",
                "warmup_steps": 100,
                "decay_start": 4000,
                "decay_end": 12000,
                "num_replicas": 4,
                "min_learning_rate": 0.01,
            }
        ),
        # The trainer passes these too; the schedule ignores them.
        num_epochs=3,
        num_steps_per_epoch=10,
    )
    assert isinstance(scheduler, RnmtPlusLearningRate)
    assert scheduler.warmup_steps == 100
    assert (scheduler.decay_start, scheduler.decay_end) == (4000, 12000)
    assert scheduler.min_learning_rate == 0.01
    assert _lr_at(scheduler, 2000) == pytest.approx(LR0 * 4 * 8**-0.5)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"decay_start": -5}, "decay_start"),
        ({"decay_end": 4000}, "decay_end"),
        ({"decay_end": 10}, "decay_end"),
        ({"num_replicas": 0}, "num_replicas"),
        ({"num_replicas": 1.5}, "num_replicas"),
        ({"num_replicas": 0, "formula": "authors"}, "num_replicas"),
        ({"formula": "published"}, "formula"),
        ({"min_learning_rate": -0.1}, "min_learning_rate"),
    ],
)
def test_bad_configuration(kwargs, name):
    args = {"warmup_steps": 100, "decay_start": 4000, "decay_end": 12000, **kwargs}
    with pytest.raises(ConfigurationError, match=name):
        RnmtPlusLearningRate(_optimizer(LR0), **args)


class _RecordLearningRate(TrainerCallback):
    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        self.learning_rates: List[float] = []

    def on_batch(self, trainer, *args, is_training: bool, **kwargs) -> None:
        if is_training:
            self.learning_rates.append(trainer.optimizer.param_groups[0]["lr"])


def _train(serialization_dir, num_epochs: int, formula: str = "rnmt_plus") -> _RecordLearningRate:
    torch.manual_seed(0)
    model = ToyRegression()
    instances = [
        Instance({"x": TensorField(torch.tensor([float(i)])), "y": TensorField(torch.ones(1))})
        for i in range(6)
    ]
    loader = SimpleDataLoader(instances, batch_size=2, vocab=model.vocab)  # 3 batches per epoch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = RnmtPlusLearningRate(
        optimizer, warmup_steps=2, decay_start=4, decay_end=20, num_replicas=2, formula=formula
    )
    recorder = _RecordLearningRate(str(serialization_dir))
    GradientDescentTrainer(
        model,
        optimizer,
        loader,
        num_epochs=num_epochs,
        serialization_dir=str(serialization_dir),
        checkpointer=Checkpointer(serialization_dir),
        learning_rate_scheduler=scheduler,
        callbacks=[recorder],
    ).train()
    assert scheduler.last_epoch == 3 * num_epochs
    return recorder


@pytest.mark.parametrize(
    "formula, first_factors",
    [
        ("rnmt_plus", (1.25, 1.5, 2 * 4 ** (-2 / 16))),
        # 1 + t / 2 for t = 1, 2; then the decay at t = 3 (s = 4 is not reached): n = 2.
        ("authors", (1.5, 2.0, 2.0)),
    ],
)
def test_trainer_recovery_continues_the_schedule(tmp_path, formula, first_factors):
    uninterrupted = _train(tmp_path / "straight", num_epochs=3, formula=formula).learning_rates
    assert uninterrupted[:3] == pytest.approx([0.01 * f for f in first_factors])
    assert len(set(uninterrupted)) == (9 if formula == "rnmt_plus" else 7)

    _train(tmp_path / "recovered", num_epochs=1, formula=formula)
    resumed = _train(tmp_path / "recovered", num_epochs=3, formula=formula).learning_rates
    assert resumed == pytest.approx(uninterrupted[3:])


# ------------------------------------------------------------------ the authors' schedule


def authors_learning_rate(step: int, global_batch: int) -> float:
    """
    Transcribed from GitHub uclanlp/ELMO-C: `NoamOpt_ADAM.rate` (source/models/optimizers.py) with
    the arguments `stand_alone_scripts/parse_config.py` gives it for `config.json`'s "optimizer"
    (decay_ratio 0.4, end_decay_ratio 2.0, base_ratio 1.0, base_scale 1e-4, warmup 10000).
    """
    batch_size = global_batch
    start_decay = int(400000000 / batch_size * 0.4)
    end_decay = int(400000000 / batch_size * 2.0)
    n = 1.0 * batch_size / 128
    base_scale, warmup = 0.0001, 10000
    if step < end_decay:
        return base_scale * min(
            1 + step * (n - 1) / warmup,
            n,
            n * ((2 * n) ** ((start_decay - step) / (end_decay - start_decay))),
        )
    return base_scale / 2


def _authors_scheduler(per_worker_batch: int, **kwargs) -> RnmtPlusLearningRate:
    return LearningRateScheduler.from_params(
        optimizer=_optimizer(1e-4),
        params=Params({"type": "elmoc_rnmt_plus", "batch_size": per_worker_batch, **kwargs}),
        num_epochs=10,
        num_steps_per_epoch=1000,
    )


@pytest.mark.parametrize("global_batch", [256, 1024])
@pytest.mark.parametrize("workers", [1, 4])
def test_authors_schedule_for_any_batch_and_number_of_workers(global_batch, workers, monkeypatch):
    # The number of workers comes from torch.distributed, as in allennlp's distributed training.
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: workers > 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: workers)
    scheduler = _authors_scheduler(global_batch // workers)
    start, end = int(4e8 / global_batch * 0.4), int(4e8 / global_batch * 2.0)
    assert (scheduler.decay_start, scheduler.decay_end) == (start, end)
    assert scheduler.num_replicas == global_batch / 128
    ten_epochs = int(4e8 / global_batch)  # 4e8 windows: the authors' 10 epochs
    for step in (
        1,
        2,
        5000,
        9999,
        10000,
        20000,
        start - 1,
        start,
        start + 1,
        (start + end) // 2,
        ten_epochs,
        end - 1,
        end,
        end + 1,
        3 * end,
    ):
        expected = authors_learning_rate(step, global_batch)
        assert _lr_at(scheduler, step) == pytest.approx(expected, rel=1e-12), step


def test_authors_schedule_peak_and_end_of_ten_epochs():
    # At B = 256: peak 2e-4, and after 10 epochs (4e8 windows) still 1.19e-4 (the decay runs to
    # 20 epochs).
    scheduler = _authors_scheduler(256)
    values = [_lr_at(scheduler, t) for t in range(0, int(4e8 / 256) + 1, 997)]
    assert max(values) == pytest.approx(2e-4)
    assert _lr_at(scheduler, int(4e8 / 256)) == pytest.approx(2e-4 * 4**-0.375, rel=1e-9)
    # The same number of windows with 4 workers of 256 (B = 1024): peak 8e-4, same 1.6e8-window
    # decay start.
    scheduler = _authors_scheduler(256, world_size=4)
    assert _lr_at(scheduler, 10000) == pytest.approx(8e-4)
    assert scheduler.decay_start * 1024 == pytest.approx(1.6e8, rel=1e-5)


def test_authors_schedule_explicit_arguments_and_errors():
    scheduler = _authors_scheduler(
        8,
        world_size=2,
        warmup_steps=10,
        decay_start_instances=1600,
        decay_end_instances=3200,
        reference_batch_size=4,
    )
    assert scheduler.formula == "authors"
    assert (scheduler.num_replicas, scheduler.decay_start, scheduler.decay_end) == (4, 100, 200)
    assert _lr_at(scheduler, 5) == pytest.approx(1e-4 * (1 + 5 * 3 / 10))
    assert _lr_at(scheduler, 150) == pytest.approx(1e-4 * 4 * 8**-0.5)
    assert _lr_at(scheduler, 199) < 1e-4 * 0.6 and _lr_at(scheduler, 200) == pytest.approx(5e-5)
    for bad in ({"batch_size": 0}, {"world_size": 0}, {"reference_batch_size": 0}):
        with pytest.raises(ConfigurationError, match=next(iter(bad))):
            RnmtPlusLearningRate.from_global_batch(_optimizer(1e-4), **{"batch_size": 8, **bad})


def test_authors_schedule_with_a_small_batch_still_halves_at_the_end():
    # B = 64: n = 0.5, so 2n = 1 and the decay term is constant; the authors' rule drops to
    # lr0 / 2 at e.
    scheduler = _authors_scheduler(64)
    assert _lr_at(scheduler, 1000) == pytest.approx(0.5e-4)
    assert _lr_at(scheduler, scheduler.decay_end) == pytest.approx(0.5e-4)
    assert all(math.isfinite(_lr_at(scheduler, t)) for t in (0, 10**6, 10**8))


@pytest.mark.parametrize(
    "loader_batch, accumulation, world_size", [(8, 1, 1), (4, 3, 1), (6, 2, 4)]
)
def test_the_trainer_gives_the_schedule_the_global_batch(loader_batch, accumulation, world_size):
    # B = the loader's batch x gradient accumulation x world size, whatever the config says
    # elsewhere: `-o '{"data_loader.batch_sampler.batch_size": N}'` moves the schedule with it.
    model = ToyRegression()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    scheduler = RnmtPlusLearningRate.from_global_batch(
        optimizer,
        warmup_steps=10,
        decay_start_instances=4800,
        decay_end_instances=9600,
        reference_batch_size=4,
    )
    with pytest.raises(ConfigurationError, match="global batch"):
        scheduler.step_batch(1)  # no trainer has told it B yet
    instances = [Instance({"x": TensorField(torch.tensor([1.0])), "y": TensorField(torch.ones(1))})]
    FastRecoveryTrainer(
        model,
        optimizer,
        SimpleDataLoader(instances, batch_size=loader_batch, vocab=model.vocab),
        num_epochs=1,
        num_gradient_accumulation_steps=accumulation,
        world_size=world_size,
        learning_rate_scheduler=scheduler,
    )
    global_batch = loader_batch * accumulation * world_size
    assert scheduler.global_batch == global_batch
    assert scheduler.num_replicas == global_batch / 4
    assert (scheduler.decay_start, scheduler.decay_end) == (
        4800 // global_batch,
        9600 // global_batch,
    )


def test_a_config_batch_size_that_disagrees_with_the_loader_is_an_error():
    model = ToyRegression()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    instances = [Instance({"x": TensorField(torch.tensor([1.0])), "y": TensorField(torch.ones(1))})]
    loader = SimpleDataLoader(instances, batch_size=16, vocab=model.vocab)
    for configured, accumulation, ok in ((16, 1, True), (16, 2, False), (768, 1, False)):
        scheduler = RnmtPlusLearningRate.from_global_batch(optimizer, batch_size=configured)
        build = lambda: FastRecoveryTrainer(  # noqa: E731
            model,
            optimizer,
            loader,
            num_epochs=1,
            num_gradient_accumulation_steps=accumulation,
            learning_rate_scheduler=scheduler,
        )
        if ok:
            build()
        else:
            with pytest.raises(ConfigurationError, match="learning_rate_scheduler.batch_size"):
                build()


# ------------------------------------------------------------------ sized from the run


def _run_scheduler(num_epochs: int, steps_per_epoch: int, **kwargs) -> RnmtPlusLearningRate:
    # As allennlp's trainer builds it: num_epochs and the loader's length come from the trainer.
    return LearningRateScheduler.from_params(
        optimizer=_optimizer(LR0),
        params=Params({"type": "elmoc_rnmt_plus_run", **kwargs}),
        num_epochs=num_epochs,
        num_steps_per_epoch=steps_per_epoch,
    )


@pytest.mark.parametrize("steps_per_epoch", [200, 660, 6000])
@pytest.mark.parametrize("num_epochs", [1, 3])
def test_run_fractions_decay_alike_for_any_corpus_length(steps_per_epoch, num_epochs):
    scheduler = _run_scheduler(num_epochs, steps_per_epoch)
    total = num_epochs * steps_per_epoch
    assert (scheduler.decay_start, scheduler.decay_end) == (total // 2, total)
    # The same curve at the same fractions of the run: held at lr0 for the first half, then down
    # to lr0 / 2 at the last step, whatever the corpus's length.
    for fraction, factor in ((0.0, 1.0), (0.25, 1.0), (0.5, 1.0), (0.75, 2**-0.5), (1.0, 0.5)):
        assert _lr_at(scheduler, round(fraction * total)) == pytest.approx(LR0 * factor, rel=1e-12)


def test_run_fractions_equal_the_explicit_steps_they_stand_for():
    # 660 steps, n = 4: the warm-up ends at 10% of the run (t = n * p = 66), the decay runs
    # from 50% to 100% of it (n * t from 1320 to 2640).
    fractions = _run_scheduler(
        1,
        660,
        warmup_fraction=0.1,
        decay_start_fraction=0.5,
        decay_end_fraction=1.0,
        num_replicas=4,
    )
    steps = RnmtPlusLearningRate(
        _optimizer(LR0), warmup_steps=16, decay_start=1320, decay_end=2640, num_replicas=4
    )
    assert (fractions.warmup_steps, fractions.decay_start, fractions.decay_end) == (16, 1320, 2640)
    for t in range(0, 800, 7):
        assert _lr_at(fractions, t) == _lr_at(steps, t)
    assert _lr_at(fractions, 330) == pytest.approx(4 * LR0)
    assert _lr_at(fractions, 660) == pytest.approx(LR0 / 2)


def test_run_fractions_through_the_trainer(tmp_path):
    # 3 batches per epoch x 4 epochs = 12 steps: the decay from step 6 to 12 is reached whatever
    # explicit steps would have said.
    torch.manual_seed(0)
    model = ToyRegression()
    instances = [
        Instance({"x": TensorField(torch.tensor([float(i)])), "y": TensorField(torch.ones(1))})
        for i in range(6)
    ]
    recorder = _RecordLearningRate(str(tmp_path))
    trainer = GradientDescentTrainer.from_partial_objects(
        model,
        serialization_dir=str(tmp_path),
        data_loader=SimpleDataLoader(instances, batch_size=2, vocab=model.vocab),
        num_epochs=4,
        optimizer=Lazy(lambda model_parameters: SgdOptimizer(model_parameters, lr=0.01)),
        learning_rate_scheduler=Lazy(
            RnmtPlusLearningRate.from_run_length, constructor_extras={"decay_start_fraction": 0.5}
        ),
        callbacks=[Lazy(lambda serialization_dir: recorder)],
    )
    trainer.train()
    rates = recorder.learning_rates
    assert len(rates) == 12
    expected = [0.01 * min(1.0, 2 ** ((6 - t) / 6)) for t in range(1, 13)]
    assert rates == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "num_steps_per_epoch, kwargs, name",
    [
        (None, {}, "no len"),
        (10, {"decay_start_fraction": 0.8, "decay_end_fraction": 0.8}, "decay_end_fraction"),
        # One step: 0.6 and 0.9 of it round to the same step.
        (1, {"decay_start_fraction": 0.6, "decay_end_fraction": 0.9}, "decay_end_fraction"),
        (10, {"warmup_fraction": -0.1}, "warmup_fraction"),
        (10, {"decay_start_fraction": -0.1}, "decay_start_fraction"),
        (10, {"num_replicas": 0}, "num_replicas"),
        (0, {}, "steps per epoch"),
    ],
)
def test_run_fractions_bad_configuration(num_steps_per_epoch, kwargs, name):
    with pytest.raises(ConfigurationError, match=name):
        RnmtPlusLearningRate.from_run_length(
            _optimizer(LR0), num_epochs=1, num_steps_per_epoch=num_steps_per_epoch, **kwargs
        )
