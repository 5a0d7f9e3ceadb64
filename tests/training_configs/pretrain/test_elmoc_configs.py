"""
The pretraining configs build; the paper-size one is the paper's model (exact parameter count)
with the authors' recipe (window mode, their schedule, Adam eps, no output dropout) and trains;
the config builders reject settings they do not know.
"""

import json
import math
from pathlib import Path

import _jsonnet
import pytest
import torch

from allennlp.commands.train import TrainModel, train_model
from allennlp.common import Params
from allennlp.data import Vocabulary
from allennlp.models import Model
from allennlp.training.learning_rate_schedulers import LearningRateScheduler

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.fasttext.training import train_fasttext
from tests.conftest import LM_CORPUS
from tests.training.test_rnmt_plus_learning_rate import authors_learning_rate

PRETRAIN_CONFIGS = Path(__file__).resolve().parents[3] / "training_configs" / "pretrain"
LIBSONNET = PRETRAIN_CONFIGS / "elmoc.libsonnet"
BASELINES = PRETRAIN_CONFIGS / "baselines.libsonnet"
REQUIRED = {"fasttext_path": "ft.bin", "embedding_dim": 8, "train_data_path": "corpus/*"}


@pytest.fixture(scope="module")
def corpus_environment(tmp_path_factory):
    """fastText vectors of the configs' input dimensions, and the fixture corpus as data paths."""
    directory = tmp_path_factory.mktemp("configs")
    corpus = directory / "corpus.txt"
    corpus.write_text((LM_CORPUS / "train-00002-of-00002.txt").read_text())
    vectors = {}
    for dim in (100, 300):
        vectors[dim] = train_fasttext(
            corpus,
            directory / f"ft{dim}.bin",
            dim=dim,
            min_count=1,
            bucket=20000,
            epoch=1,
            thread=1,
        )
    return {
        "ELMOC_TRAIN_DATA": str(LM_CORPUS / "train-*.txt"),
        "ELMOC_VALIDATION_DATA": str(LM_CORPUS / "valid.txt"),
        "vectors": vectors,
    }


def _params(config: str, environment, dim: int, overrides: str = "") -> Params:
    ext_vars = {
        "ELMOC_FASTTEXT": str(environment["vectors"][dim]),
        "ELMOC_TRAIN_DATA": environment["ELMOC_TRAIN_DATA"],
        "ELMOC_VALIDATION_DATA": environment["ELMOC_VALIDATION_DATA"],
    }
    return Params.from_file(str(PRETRAIN_CONFIGS / config), overrides, ext_vars=ext_vars)


def _trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.needs_meta_device
def test_paper_config_has_76m_trainable_parameters(corpus_environment):
    params = _params("elmoc.jsonnet", corpus_environment, 300)
    with torch.device("meta"):
        model = Model.from_params(vocab=Vocabulary.empty(), params=params["model"])
    count = _trainable(model)
    # Paper, Tables 2 and 4: ELMo-C has 76M trainable parameters.
    assert count == 76_185_176
    # Closed form: per direction an input projection with bias + LayerNorm, 2 LSTM-with-projection
    # layers and a continuous head (the authors' two independent LMs).
    d, p, c = 300, 512, 4096
    layer = p * 4 * c + (p * 4 * c + 4 * c) + c * p + 2 * p
    assert count == 2 * ((d * p + p) + 2 * p + 2 * layer + (p * d + d))
    encoder = model._contextualizer
    assert encoder.input_projection.bias is not None
    assert encoder.backward_input_projection.weight.shape == (p, d)
    assert model._backward_output_layer is not None and model._dropout.p == 0.0


def test_paper_config_is_the_authors_recipe(corpus_environment):
    params = _params("elmoc.jsonnet", corpus_environment, 300).as_dict()
    assert params["dataset_reader"]["mode"] == "window"
    assert params["dataset_reader"]["window_length"] == 20
    assert "max_sequence_length" not in params["dataset_reader"]
    trainer = params["trainer"]
    assert trainer["optimizer"] == {"type": "adam", "lr": 1e-4, "eps": 1e-6}
    assert trainer["grad_norm"] == 1.0
    assert params["model"]["dropout"] == 0.0
    assert params["model"]["contextualizer"]["recurrent_dropout"] == 0.1
    # Every epoch in a new order (authors' data.py).
    assert params["dataset_reader"]["shuffle"] is True
    # The schedule is the authors' for the global batch, which the trainer gives it (here 768 x
    # 1 worker); the config does not repeat the batch size.
    assert "batch_size" not in trainer["learning_rate_scheduler"]
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-4, eps=1e-6)
    scheduler = LearningRateScheduler.from_params(
        optimizer=optimizer, params=Params(trainer["learning_rate_scheduler"])
    )
    batch = params["data_loader"]["batch_sampler"]["batch_size"]
    assert batch == 768
    scheduler.set_global_batch(batch)
    for step in (1, 5000, 10000, 200000, 500000, 1041666, 2000000):
        scheduler.step_batch(step)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(
            authors_learning_rate(step, batch), rel=1e-12
        )


def test_paper_config_trains_in_window_mode(tmp_path, tiny_fasttext_path):
    """elmoc.jsonnet itself, with toy sizes by overrides, through `allennlp train`."""
    tiny = {
        "model.contextualizer.input_dim": 16,
        "model.contextualizer.projection_dim": 6,
        "model.contextualizer.cell_dim": 10,
        "data_loader.batch_sampler.batch_size": 8,
        "trainer.num_epochs": 1,
    }
    for head in ("output_layer", "backward_output_layer"):
        tiny[f"model.{head}.input_dim"] = 6
        tiny[f"model.{head}.embedding_dim"] = 16
    ext_vars = {
        "ELMOC_FASTTEXT": str(tiny_fasttext_path),
        "ELMOC_TRAIN_DATA": str(LM_CORPUS / "train-*.txt"),
        "ELMOC_VALIDATION_DATA": str(LM_CORPUS / "valid.txt"),
    }
    params = Params.from_file(str(PRETRAIN_CONFIGS / "elmoc.jsonnet"), json.dumps(tiny), ext_vars)
    model = train_model(params, str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert math.isfinite(metrics["training_loss"]) and math.isfinite(metrics["validation_loss"])
    # 20-token windows: 35 fixture sentences are ~1,000 stream tokens, ~50 windows, 7 batches.
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["dataset_reader"]["mode"] == "window"
    assert config["trainer"]["learning_rate_scheduler"]["type"] == "elmoc_rnmt_plus"
    assert metrics["training_forward_loss"] > 0 and metrics["training_backward_loss"] > 0
    # The constant-prediction baseline beside the loss (issue 44), per direction and their mean.
    for split in ("training", "validation"):
        baselines = [
            metrics[f"{split}_{d}_constant_baseline_loss"] for d in ("forward", "backward")
        ]
        assert metrics[f"{split}_constant_baseline_loss"] == pytest.approx(sum(baselines) / 2)
        assert all(0 < baseline < 1 for baseline in baselines)
    assert type(model).__name__ == "BidirectionalLanguageModel"


def test_start_and_end_tokens_have_two_vectors_as_the_authors(corpus_environment):
    from allennlp.data.token_indexers import TokenIndexer
    from allennlp.modules.token_embedders import TokenEmbedder

    params = _params("elmoc.jsonnet", corpus_environment, 300).as_dict()
    indexer = TokenIndexer.from_params(
        Params(params["dataset_reader"]["token_indexers"]["fasttext"])
    )
    embedder = TokenEmbedder.from_params(
        Params(params["model"]["text_field_embedder"]["token_embedders"]["fasttext"])
    )

    def vector(text: str) -> torch.Tensor:
        ids = torch.tensor([[indexer.token_ids(text)]])
        return embedder(ids)[0, 0]

    # `</S>` is fastText's end-of-sentence word `</s>`; `<S>` is a vector of its own (the
    # authors' get_word_vector("<s>") / ("</s>"), source/models/build_word_vectors.py).
    torch.testing.assert_close(vector("</S>"), vector("</s>"))
    assert (vector("<S>") - vector("</S>")).abs().max() > 1e-3


def test_small_config_builds_and_is_small(corpus_environment):
    params = _params("elmoc_small.jsonnet", corpus_environment, 100)
    model = Model.from_params(vocab=Vocabulary.empty(), params=params["model"])
    assert 1_000_000 < _trainable(model) < 5_000_000
    assert params["data_loader"]["batch_sampler"]["batch_size"] == 64


@pytest.mark.parametrize("steps_per_epoch", [200, 660, 6000])
def test_small_config_decays_on_a_corpus_of_any_length(corpus_environment, steps_per_epoch):
    # The quickstart's schedule is sized by the run's steps, which allennlp's trainer gives it
    # (num_epochs x the loader's length): 204 batches (a 211k-token corpus) decay as PTB's 660.
    params = _params("elmoc_small.jsonnet", corpus_environment, 100)
    trainer = params["trainer"]
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=2e-3)
    scheduler = LearningRateScheduler.from_params(
        optimizer=optimizer,
        params=trainer["learning_rate_scheduler"],
        num_epochs=trainer["num_epochs"],
        num_steps_per_epoch=steps_per_epoch,
    )

    def rate(step: int) -> float:
        scheduler.step_batch(step)
        return optimizer.param_groups[0]["lr"]

    total = trainer["num_epochs"] * steps_per_epoch
    assert rate(total // 2) == pytest.approx(2e-3)
    assert rate(3 * total // 4) == pytest.approx(2e-3 * 2**-0.5, rel=1e-2)
    assert rate(total) == pytest.approx(1e-3)


def test_small_config_takes_its_steps_from_the_corpus_index(corpus_environment, tmp_path):
    """Through `allennlp train`: the schedule ends at the run's last step, whatever its length."""
    tiny = {
        "model.contextualizer.projection_dim": 6,
        "model.contextualizer.cell_dim": 10,
        "model.output_layer.input_dim": 6,
        "model.backward_output_layer.input_dim": 6,
        "data_loader.batch_sampler.batch_size": 8,
        "trainer.num_epochs": 2,
    }
    params = _params("elmoc_small.jsonnet", corpus_environment, 100, json.dumps(tiny))
    run = TrainModel.from_params(
        params=params, serialization_dir=str(tmp_path / "run"), local_rank=0
    )
    trainer = run.trainer
    steps = len(trainer.data_loader)
    assert steps > 1  # the corpus index knows the epoch's batches before reading them
    scheduler = trainer._learning_rate_scheduler
    assert (scheduler.decay_start, scheduler.decay_end) == (steps, 2 * steps)
    run.run()
    assert trainer._total_batches_completed == 2 * steps
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(2e-3 / 2)


# ------------------------------------------------------------------ settings are checked


def _evaluate(snippet: str) -> dict:
    return json.loads(_jsonnet.evaluate_snippet("test", snippet))


def _elmoc(**settings) -> dict:
    return _evaluate(
        f"(import {json.dumps(str(LIBSONNET))}).config({json.dumps({**REQUIRED, **settings})})"
    )


def _baseline(variant: str, **settings) -> dict:
    return _evaluate(
        f"(import {json.dumps(str(BASELINES))}).variant({json.dumps(variant)}, "
        f"{json.dumps({**REQUIRED, **settings})})"
    )


@pytest.mark.parametrize(
    "build, key, suggestion",
    [
        (_elmoc, "lerning_rate", "learning_rate"),
        (_elmoc, "batchsize", "batch_size"),
        (_elmoc, "num_sample", "num_layers"),  # a baseline setting is unknown to elmoc.config
        (lambda **s: _baseline("sampled", **s), "num_sample", "num_samples"),
        (lambda **s: _baseline("elmoc_rnd", **s), "recurent_dropout", "recurrent_dropout"),
    ],
)
def test_unknown_settings_are_errors_naming_the_key_and_a_close_one(build, key, suggestion):
    with pytest.raises(
        RuntimeError, match=f'unknown setting "{key}" \\(did you mean "{suggestion}"\\?\\)'
    ):
        build(**{key: 1})


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"mode": "window", "max_sequence_length": 50},
            "max_sequence_length applies to mode 'sentence'",
        ),
        (
            {"max_sequence_length": 50, "window_length": 10},
            "window_length applies to mode 'window'",
        ),
        ({"mode": "windows"}, "mode must be one of window, sentence"),
        ({"schedule": "authors", "decay_start": 5}, "decay_start applies to schedule 'rnmt_plus'"),
        (
            {"decay_start": 5, "decay_end": 9, "reference_batch_size": 64},
            "reference_batch_size applies",
        ),
        ({"schedule": "rnmt_plus"}, "schedule 'rnmt_plus' needs decay_(start|end)"),
        (
            {"decay_start": 5, "decay_end": 9, "decay_end_fraction": 1.0},
            "decay_end_fraction applies",
        ),
        ({"decay_start_fraction": 0.5, "warmup_steps": 100}, "warmup_steps applies to schedules"),
        ({"num_replicas": 2}, "num_replicas applies to schedules 'rnmt_plus' and 'run_fractions'"),
    ],
)
def test_settings_that_do_not_apply_are_errors(settings, message):
    with pytest.raises(RuntimeError, match=message):
        _elmoc(**settings)


def test_explicit_steps_select_the_published_formula_and_length_selects_sentences():
    config = _elmoc(decay_start=10, decay_end=20, num_replicas=2, max_sequence_length=50)
    assert config["trainer"]["learning_rate_scheduler"] == {
        "type": "elmoc_rnmt_plus_steps",
        "warmup_steps": 10000,
        "decay_start": 10,
        "decay_end": 20,
        "num_replicas": 2,
    }
    assert config["dataset_reader"]["mode"] == "sentence"
    assert config["dataset_reader"]["max_sequence_length"] == 50
    shared = _elmoc(separate_input_projections=False, separate_output_layers=False)
    assert "backward_output_layer" not in shared["model"]
    assert shared["model"]["contextualizer"]["separate_input_projections"] is False
