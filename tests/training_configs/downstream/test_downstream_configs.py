"""
Every config in training_configs/downstream/ trains for an epoch on tiny fixtures with the tiny
ELMo-C archive, archives, and reloads; plus BCN with ELMo-C through its `elmo` argument.
"""

import json

import pytest
import torch

from allennlp.commands.train import train_model_from_file
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import import_module_and_submodules
from allennlp.data import Batch, Instance, Token, Vocabulary
from allennlp.data.fields import LabelField, TextField
from allennlp.models import Model
from allennlp.models.archival import load_archive
from allennlp.modules import FeedForward, Maxout
from allennlp.modules.seq2seq_encoders import LstmSeq2SeqEncoder
from allennlp.modules.text_field_embedders import BasicTextFieldEmbedder

from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.downstream.elmoc import ElmocElmo
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from elmoc_allennlp.modules.token_embedders.fasttext_token_embedder import FastTextTokenEmbedder
from tests.downstream.conftest import DOWNSTREAM_CONFIGS

# The validation metric of each config (the paper's score for the task, quoted in its header); a
# new config must be added here to be tested.
VALIDATION_METRICS = {
    "snli_esim.jsonnet": "accuracy",
    "sst5_bcn.jsonnet": "accuracy",
    "ner_crf_tagger.jsonnet": "f1-measure-overall",
    "srl.jsonnet": "f1-measure-overall",
    "coref.jsonnet": "coref_f1",
}
# Test-only overrides that shrink the two slowest recipes (8 x 300 alternating LSTM layers, a
# 2400 -> 1200 -> 600 maxout) so that the suite stays fast. They touch hidden sizes only: every
# dimension that depends on ELMo-C or fastText is computed by the config itself.
SMALL = {
    "srl.jsonnet": {"model.encoder.hidden_size": 16, "model.encoder.num_layers": 2},
    "sst5_bcn.jsonnet": {
        "model.pre_encode_feedforward.hidden_dims": [16],
        "model.encoder.input_size": 16,
        "model.encoder.hidden_size": 16,
        "model.integrator.input_size": 96,
        "model.integrator.hidden_size": 16,
        "model.output_layer.input_dim": 128,
        "model.output_layer.output_dims": [32, 16, 5],
    },
}


@pytest.fixture(scope="module", autouse=True)
def registered():
    import_module_and_submodules("allennlp_models")
    import_module_and_submodules("elmoc_allennlp")


def test_every_downstream_config_is_tested():
    configs = sorted(path.name for path in DOWNSTREAM_CONFIGS.glob("*.jsonnet"))
    assert configs == sorted(VALIDATION_METRICS)


@pytest.mark.parametrize("config_name", sorted(VALIDATION_METRICS))
def test_config_trains_an_epoch_and_archives(
    config_name, downstream_environment, elmoc_archive, tmp_path
):
    config = DOWNSTREAM_CONFIGS / config_name
    serialization_dir = tmp_path / "run"
    train_model_from_file(
        str(config),
        str(serialization_dir),
        overrides=json.dumps({"trainer.num_epochs": 1, **SMALL.get(config_name, {})}),
    )
    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    metric = VALIDATION_METRICS[config_name]
    for split in ("validation", "test"):
        assert 0.0 <= metrics[f"{split}_{metric}"] <= 1.0
    # The run selects its model on the paper's metric and reports it as its best.
    assert metrics[f"best_validation_{metric}"] == metrics[f"validation_{metric}"]
    saved = json.loads((serialization_dir / "config.json").read_text())
    assert saved["trainer"]["validation_metric"] == f"+{metric}"

    downstream = load_archive(str(serialization_dir / "model.tar.gz")).model
    elmoc = [module for module in downstream.modules() if isinstance(module, ElmocTokenEmbedder)]
    assert len(elmoc) == 1
    # The biLM was frozen: its weights are the pretrained ones; the mix was trained.
    pretrained = load_archive(str(elmoc_archive)).model.state_dict()
    for name, value in elmoc[0].elmo.bilm.bilm.state_dict().items():
        assert torch.equal(value, pretrained[name]), name
    mix = elmoc[0].elmo.scalar_mix_0
    initial = torch.tensor([0.0, 0.0, 0.0, 1.0])
    trained = torch.cat([p.detach() for p in mix.scalar_parameters] + [mix.gamma.detach()])
    assert not torch.equal(trained, initial)


def test_recipes_l2_penalty_on_the_mixing_weights_is_in_the_loss(downstream_environment):
    params = Params.from_file(str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"))
    vocab = Vocabulary()
    vocab.add_tokens_to_namespace(["O", "U-PER", "B-ORG", "L-ORG"], "labels")
    vocab.add_tokens_to_namespace(list("abc"), "token_characters")
    model = Model.from_params(vocab=vocab, params=params["model"])
    mix = next(m for m in model.modules() if isinstance(m, ElmocTokenEmbedder)).elmo.scalar_mix_0
    with torch.no_grad():
        for parameter, value in zip(mix.scalar_parameters, [1.0, -2.0, 0.5]):
            parameter.fill_(value)
    assert model.get_regularization_penalty().item() == pytest.approx(0.1 * (1 + 4 + 0.25))


def test_elmoc_dim_that_does_not_match_the_archive_is_a_configuration_error(
    downstream_environment, monkeypatch, tmp_path
):
    monkeypatch.setenv("ELMOC_DIM", "1024")
    with pytest.raises(ConfigurationError, match=r"bilm_dim \(ELMOC_DIM.* is 1024.* gives 12-"):
        train_model_from_file(
            str(DOWNSTREAM_CONFIGS / "snli_esim.jsonnet"),
            str(tmp_path / "run"),
            overrides=json.dumps({"trainer.num_epochs": 1}),
        )


# ---------------------------------------------------------------------- BCN


def _sst_batch(elmo_key, indexer, words, vocab):
    texts = [["a", "fine", "film", "."], ["terrible", "!"], ["the", "cat"]]
    instances = [
        Instance(
            {
                "tokens": TextField([Token(t) for t in text], {"tokens": words, elmo_key: indexer}),
                "label": LabelField(str(index % 5)),
            }
        )
        for index, text in enumerate(texts)
    ]
    batch = Batch(instances)
    batch.index_instances(vocab)
    return batch.as_tensor_dict()


def _bcn(
    vocab, text_field_embedder, input_dim, elmo=None, use_input=False, use_output=False, elmo_dim=12
):
    from allennlp_models.classification.models.biattentive_classification_network import (
        BiattentiveClassificationNetwork,
    )

    integrator_dim = 8 + (elmo_dim if use_output else 0)
    return BiattentiveClassificationNetwork(
        vocab,
        text_field_embedder,
        embedding_dropout=0.0,
        pre_encode_feedforward=FeedForward(input_dim, 1, 6, torch.nn.ReLU()),
        encoder=LstmSeq2SeqEncoder(6, 4, bidirectional=True),
        integrator=LstmSeq2SeqEncoder(24, 4, bidirectional=True),
        integrator_dropout=0.0,
        output_layer=Maxout(4 * integrator_dim, 1, 5, 2),
        elmo=elmo,
        use_input_elmo=use_input,
        use_integrator_output_elmo=use_output,
    )


def test_bcn_with_elmoc_in_the_embedder_equals_bcn_with_elmoc_as_input_elmo(
    elmoc_archive, tiny_fasttext_path
):
    """sst5_bcn.jsonnet puts ELMo-C in the text field embedder; that is BCN's use_input_elmo."""
    vocab = Vocabulary()
    vocab.add_tokens_to_namespace([str(i) for i in range(5)], "labels")
    words = FastTextSubwordIndexer(str(tiny_fasttext_path))
    indexer = BilmArchiveIndexer.from_archive(str(elmoc_archive))
    embedder = ElmocTokenEmbedder(str(elmoc_archive), dropout=0.0)
    fasttext = FastTextTokenEmbedder(str(tiny_fasttext_path))

    in_embedder = _bcn(vocab, BasicTextFieldEmbedder({"tokens": fasttext, "elmoc": embedder}), 28)
    elmo = ElmocElmo(None, 1, dropout=0.0, module=embedder.elmo.bilm)
    as_elmo = _bcn(vocab, BasicTextFieldEmbedder({"tokens": fasttext}), 28, elmo, use_input=True)
    # Same weights; the embedder concatenates [elmoc; tokens] (sorted keys), BCN [tokens; elmo].
    state = in_embedder.state_dict()
    linear = "_pre_encode_feedforward._linear_layers.0.weight"
    state[linear] = torch.cat([state[linear][:, 12:], state[linear][:, :12]], dim=1)
    state = {
        name.replace("_text_field_embedder.token_embedder_elmoc._elmo.", "_elmo."): value
        for name, value in state.items()
    }
    as_elmo.load_state_dict(state)
    in_embedder.eval(), as_elmo.eval()
    with torch.no_grad():
        one = in_embedder(**_sst_batch("elmoc", indexer, words, vocab))
        other = as_elmo(**_sst_batch("elmo", indexer, words, vocab))
    assert torch.allclose(one["logits"], other["logits"], atol=1e-5)


def test_bcn_with_elmoc_at_input_and_integrator_output(elmoc_archive, tiny_fasttext_path):
    vocab = Vocabulary()
    vocab.add_tokens_to_namespace([str(i) for i in range(5)], "labels")
    words = FastTextSubwordIndexer(str(tiny_fasttext_path))
    indexer = BilmArchiveIndexer.from_archive(str(elmoc_archive))
    elmo = ElmocElmo(str(elmoc_archive), 2, dropout=0.0)
    model = _bcn(
        vocab,
        BasicTextFieldEmbedder({"tokens": FastTextTokenEmbedder(str(tiny_fasttext_path))}),
        28,
        elmo,
        use_input=True,
        use_output=True,
    )
    output = model(**_sst_batch("elmo", indexer, words, vocab))
    assert output["logits"].shape == (3, 5)
    output["loss"].backward()
    for mix in (elmo.scalar_mix_0, elmo.scalar_mix_1):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in mix.scalar_parameters)


def test_bcn_elmo_block_with_projection_dim_fits_a_model_sized_for_another_bilm(
    elmoc_archive, tiny_fasttext_path
):
    # The config's model-level `elmo` block (BCN's official config is sized for ELMo's 1024;
    # here a BCN sized for 20 and a 12-d biLM).
    from allennlp.modules.elmo import Elmo

    vocab = Vocabulary()
    vocab.add_tokens_to_namespace([str(i) for i in range(5)], "labels")
    block = {"archive_file": str(elmoc_archive), "num_output_representations": 2, "dropout": 0.0}
    fasttext = BasicTextFieldEmbedder({"tokens": FastTextTokenEmbedder(str(tiny_fasttext_path))})
    with pytest.raises(ConfigurationError, match="ELMo output dim"):
        _bcn(vocab, fasttext, 36, Elmo.from_params(Params(dict(block))), True, True, elmo_dim=20)
    elmo = Elmo.from_params(Params({**block, "projection_dim": 20}))
    assert isinstance(elmo, ElmocElmo) and elmo.get_output_dim() == 20
    model = _bcn(vocab, fasttext, 36, elmo, use_input=True, use_output=True, elmo_dim=20)
    words = FastTextSubwordIndexer(str(tiny_fasttext_path))
    batch = _sst_batch("elmo", BilmArchiveIndexer.from_archive(str(elmoc_archive)), words, vocab)
    output = model(**batch)
    output["loss"].backward()
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0 for p in elmo._projections.parameters()
    )
    # Each representation is its own linear map of the unprojected mix.
    plain = ElmocElmo(None, 2, dropout=0.0, module=elmo.bilm)
    plain.load_state_dict(
        {k: v for k, v in elmo.state_dict().items() if "_projections" not in k}, strict=False
    )
    elmo_tokens = batch["tokens"]["elmo"]["elmo_tokens"]
    projected = elmo(elmo_tokens)["elmo_representations"]
    for index, representation in enumerate(plain(elmo_tokens)["elmo_representations"]):
        torch.testing.assert_close(projected[index], elmo._projections[index](representation))


@pytest.mark.parametrize("config_name", ["ner_crf_tagger.jsonnet", "sst5_bcn.jsonnet"])
def test_empty_archive_is_the_fasttext_only_baseline(
    config_name, downstream_environment, monkeypatch
):
    monkeypatch.setenv("ELMOC_ARCHIVE", "")
    monkeypatch.delenv("ELMOC_DIM")
    params = Params.from_file(str(DOWNSTREAM_CONFIGS / config_name)).as_dict()
    assert sorted(params["model"]["text_field_embedder"]["token_embedders"]) == sorted(
        key for key in params["dataset_reader"]["token_indexers"]
    )
    assert all(
        spec["type"] != "elmoc_token_embedder"
        for spec in params["model"]["text_field_embedder"]["token_embedders"].values()
    )
    assert "regularizer" not in params["model"]
    first_input = (
        params["model"]["pre_encode_feedforward"]["input_dim"]
        if config_name == "sst5_bcn.jsonnet"
        else params["model"]["encoder"]["input_size"]
    )
    char_cnn = 128 if config_name == "ner_crf_tagger.jsonnet" else 0
    assert first_input == 16 + char_cnn


@pytest.mark.parametrize("with_bilm", [True, False], ids=["elmoc", "baseline"])
def test_the_ner_run_and_its_baseline_read_task_text_as_the_fasttext_model_was_trained(
    with_bilm, downstream_environment, monkeypatch
):
    """Issue #48: the README's NER block fed cased text to the walk-through's lowercased `.bin`, the ELMo-C run
    lowercasing its own input, so that its gain over the baseline was mostly the baseline's lost words.
    """
    from allennlp.data import DatasetReader

    if not with_bilm:
        monkeypatch.setenv("ELMOC_ARCHIVE", "")
        monkeypatch.delenv("ELMOC_DIM")
    params = Params.from_file(str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"))
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    words = reader._token_indexers["tokens"]
    # The tiny fastText model, as the walk-through's, is trained on lowercased text.
    assert words.vectors.case.lowercased and words.follows_model and words.lowercase_tokens
    assert words.token_ids("EU") == words.token_ids("eu")
    if with_bilm:
        assert reader._token_indexers["elmo"].token_ids("German") == reader._token_indexers[
            "elmo"
        ].token_ids("german")
    else:
        assert "elmo" not in reader._token_indexers


# ------------------------------------------------------------------ misspelt trainer keys


@pytest.mark.parametrize("config_name", sorted(VALIDATION_METRICS))
def test_downstream_configs_use_the_trainer_that_checks_its_keys(
    config_name, downstream_environment
):
    params = Params.from_file(str(DOWNSTREAM_CONFIGS / config_name))
    assert params["trainer"]["type"] == "elmoc_checked_gradient_descent"


def test_a_misspelt_trainer_key_in_a_downstream_config_is_refused(downstream_environment, tmp_path):
    serialization_dir = tmp_path / "run"
    with pytest.raises(
        ConfigurationError, match=r'"trainer.num_epoch" \(did you mean "trainer.num_epochs"\?\)'
    ):
        train_model_from_file(
            str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"),
            str(serialization_dir),
            overrides=json.dumps({"trainer.num_epoch": 1}),
        )
    # Refused before the first epoch: nothing was trained, and no folder is left to refuse the corrected rerun.
    assert not serialization_dir.exists()


def _toy_trainer(tmp_path, trainer_params: dict):
    from allennlp.data.data_loaders import SimpleDataLoader
    from allennlp.data.fields import TensorField
    from allennlp.training import Trainer

    from tests.training.toy_models import ToyRegression

    model = ToyRegression()
    instances = [Instance({"x": TensorField(torch.ones(1)), "y": TensorField(torch.ones(1))})]
    return Trainer.from_params(
        params=Params(trainer_params),
        model=model,
        serialization_dir=str(tmp_path),
        data_loader=SimpleDataLoader(instances, batch_size=1, vocab=model.vocab),
    )


def test_a_stock_trainer_with_the_plugin_imported_behaves_as_stock(tmp_path):
    from allennlp.training import GradientDescentTrainer, Trainer

    from elmoc_allennlp.training.checked_trainer import CheckedGradientDescentTrainer

    assert Trainer.resolve_class_name("gradient_descent")[0] is GradientDescentTrainer
    # allennlp's own trainer still ignores a key it does not know (its default of 20 epochs)...
    stock = _toy_trainer(tmp_path / "stock", {"type": "gradient_descent", "num_epoch": 1})
    assert type(stock) is GradientDescentTrainer and stock._num_epochs == 20
    # ...the plugin's refuses it; with the right keys it is allennlp's trainer.
    with pytest.raises(ConfigurationError, match='did you mean "trainer.num_epochs"'):
        _toy_trainer(
            tmp_path / "checked", {"type": "elmoc_checked_gradient_descent", "num_epoch": 1}
        )
    checked = _toy_trainer(
        tmp_path / "checked", {"type": "elmoc_checked_gradient_descent", "num_epochs": 2}
    )
    assert isinstance(checked, CheckedGradientDescentTrainer) and checked._num_epochs == 2
    assert type(checked).__mro__[1] is GradientDescentTrainer
    assert checked.train()["epoch"] == 1


# ------------------------------------------------------------------ predicting without spaCy


def test_ner_archive_predicts_whitespace_tokens_without_spacy(
    downstream_environment, tmp_path, monkeypatch
):
    import spacy

    from allennlp.predictors import Predictor

    serialization_dir = tmp_path / "run"
    train_model_from_file(
        str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"),
        str(serialization_dir),
        overrides=json.dumps({"trainer.num_epochs": 1}),
    )

    def no_spacy(*args, **kwargs):
        raise AssertionError("spaCy was loaded")

    monkeypatch.setattr(spacy, "load", no_spacy)
    predictor = Predictor.from_path(
        str(serialization_dir / "model.tar.gz"), "elmoc_sentence_tagger"
    )
    words = "EU rejects German call to boycott British lamb .".split()
    output = predictor.predict_json({"sentence": " ".join(words)})
    assert output["words"] == words
    assert len(output["tags"]) == len(words)
    with pytest.raises(ConfigurationError, match="sentence"):
        predictor.predict_json({"tokens": words})


def test_first_ner_epochs_at_the_recipes_learning_rate_lower_the_loss_before_the_f1(
    downstream_environment, monkeypatch, tmp_path
):
    """What the README's one-epoch path check shows when healthy: F1 can stay 0.000 at the recipe's
    learning rate (the CRF tags everything `O` first) while the loss falls."""
    from tests.downstream.test_layer_cache import _conll_file

    monkeypatch.setenv("NER_TRAIN_DATA_PATH", str(_conll_file(tmp_path / "train.txt", 32, 0)))
    monkeypatch.setenv("NER_VALIDATION_DATA_PATH", str(_conll_file(tmp_path / "dev.txt", 8, 1)))
    monkeypatch.setenv("NER_TEST_DATA_PATH", str(tmp_path / "dev.txt"))
    serialization_dir = tmp_path / "run"
    train_model_from_file(
        str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"),
        str(serialization_dir),
        overrides=json.dumps(
            {"trainer.num_epochs": 2, "evaluate_on_test": False, "data_loader.batch_size": 8}
        ),
    )
    epochs = [
        json.loads((serialization_dir / f"metrics_epoch_{epoch}.json").read_text())
        for epoch in range(2)
    ]
    assert epochs[1]["training_loss"] < epochs[0]["training_loss"]
    assert epochs[1]["validation_loss"] < epochs[0]["validation_loss"]
    assert epochs[0]["validation_f1-measure-overall"] == 0.0  # tags everything O after one epoch
