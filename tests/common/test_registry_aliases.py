"""The plugin's older, unprefixed registered names still work: configs and archives load."""
import json
import logging
from typing import Any, Dict

import numpy
import pytest
import torch

from allennlp.common import Registrable
from allennlp.data import Batch, TokenIndexer
from allennlp.data.tokenizers import Tokenizer
from allennlp.models.archival import load_archive
from allennlp.modules.token_embedders import TokenEmbedder
from allennlp.training.learning_rate_schedulers import LearningRateScheduler

import elmoc_allennlp  # noqa: F401
from elmoc_allennlp.common.elmoc_archive import ElmocArchive
from elmoc_allennlp.common.registry_aliases import register_old_name
from elmoc_allennlp.modules.elmoc_embedder import ElmocEmbedder
from elmoc_allennlp.modules.output_layers import LanguageModelOutputLayer
from tests.conftest import rewrite_archive

OLD_NAMES = [
    (TokenIndexer, "fasttext_subwords"),
    (TokenEmbedder, "fasttext"),
    (Tokenizer, "sentencepiece_bpe"),
    (LearningRateScheduler, "rnmt_plus"),
    (LanguageModelOutputLayer, "continuous"),
    (LanguageModelOutputLayer, "softmax"),
    (LanguageModelOutputLayer, "sampled_softmax"),
    (LanguageModelOutputLayer, "adaptive_softmax"),
]


# Where the new name is not the old one with the prefix (elmoc_rnmt_plus is the authors' set-up).
NEW_NAMES = {"rnmt_plus": "elmoc_rnmt_plus_steps"}


@pytest.mark.parametrize("base, old_name", OLD_NAMES, ids=[name for _, name in OLD_NAMES])
def test_every_old_name_is_the_class_of_its_elmoc_name(base, old_name):
    new_class, new_constructor = base.resolve_class_name(NEW_NAMES.get(old_name, f"elmoc_{old_name}"))
    assert new_class.__module__.startswith("elmoc_allennlp.")
    assert base.resolve_class_name(old_name) == (new_class, new_constructor)


def test_an_old_name_another_plugin_has_is_left_to_it(caplog):
    class Component(Registrable):
        pass

    @Component.register("theirs")
    class Theirs(Component):
        pass

    class Ours(Component):
        pass

    with caplog.at_level(logging.WARNING):
        register_old_name(Component, "theirs")(Ours)
        register_old_name(Component, "free")(Ours)
    assert Component.resolve_class_name("theirs")[0] is Theirs
    assert Component.resolve_class_name("free")[0] is Ours
    assert "'theirs' is taken by" in caplog.text and "Ours" in caplog.text
    register_old_name(Component, "free")(Ours)  # registering again is a no-op
    assert Component.list_available() == ["theirs", "free"]


NEW_TO_OLD = {NEW_NAMES.get(name, f"elmoc_{name}"): name for _, name in OLD_NAMES}


def _use_old_names(config: Any, renamed: Dict[str, int]) -> None:
    if isinstance(config, dict):
        if config.get("type") in NEW_TO_OLD:
            renamed[config["type"]] = renamed.get(config["type"], 0) + 1
            config["type"] = NEW_TO_OLD[config["type"]]
        for value in config.values():
            _use_old_names(value, renamed)
    elif isinstance(config, list):
        for value in config:
            _use_old_names(value, renamed)


@pytest.fixture(scope="module")
def old_names_archive(elmoc_archive, tmp_path_factory):
    """The tiny biLM archive with its config.json written with the unprefixed names."""
    renamed: Dict[str, int] = {}
    path = rewrite_archive(
        elmoc_archive,
        tmp_path_factory.mktemp("old_names") / "model.tar.gz",
        lambda config: _use_old_names(config, renamed),
    )
    assert renamed == {
        "elmoc_fasttext_subwords": 1,
        "elmoc_fasttext": 1,
        "elmoc_continuous": 2,  # forward and backward output layers
        "elmoc_rnmt_plus_steps": 1,
    }
    return path


def test_an_archive_written_with_old_names_loads_and_computes_the_same(
    elmoc_archive, old_names_archive
):
    old = load_archive(old_names_archive)
    new = load_archive(elmoc_archive)
    config = old.config.as_dict(quiet=True)
    assert config["model"]["output_layer"]["type"] == "continuous"
    assert config["trainer"]["learning_rate_scheduler"]["type"] == "rnmt_plus"
    assert type(old.model) is type(new.model)
    assert type(old.model._output_layer) is type(new.model._output_layer)

    sentences = ["the cat sat on the mat", "a dog"]
    batches = []
    for archive in (old, new):
        instances = [archive.dataset_reader.text_to_instance(s) for s in sentences]
        for instance in instances:
            archive.dataset_reader.apply_token_indexers(instance)
        batch = Batch(instances)
        batch.index_instances(archive.model.vocab)
        batches.append(batch.as_tensor_dict())
    for key in ("subword_ids", "mask"):
        assert torch.equal(
            batches[0]["tokens"]["fasttext"][key], batches[1]["tokens"]["fasttext"][key]
        )
    old.model.eval()
    new.model.eval()
    with torch.no_grad():
        old_output = old.model(**batches[0])
        new_output = new.model(**batches[1])
    assert old_output["loss"].item() > 0
    torch.testing.assert_close(old_output["loss"], new_output["loss"], rtol=1e-6, atol=1e-7)


def test_downstream_use_of_an_old_names_archive(elmoc_archive, old_names_archive):
    archive = ElmocArchive.read(old_names_archive)
    assert archive.input_key == "fasttext"
    sentences = [["the", "cat", "sat"], ["a", "dog"]]
    old_layers = ElmocEmbedder(str(old_names_archive)).embed_batch(sentences)
    new_layers = ElmocEmbedder(str(elmoc_archive)).embed_batch(sentences)
    for old, new in zip(old_layers, new_layers):
        assert old.shape == new.shape and old.shape[0] == 3 and old.shape[2] == 12
        numpy.testing.assert_allclose(old, new, rtol=1e-6, atol=1e-6)


def test_archive_config_names_are_the_new_ones(elmoc_archive):
    config = ElmocArchive.read(elmoc_archive).config
    model = config["model"]
    assert model["text_field_embedder"]["token_embedders"]["fasttext"]["type"] == "elmoc_fasttext"
    assert model["output_layer"]["type"] == "elmoc_continuous"
    assert json.dumps(config).count('"type": "fasttext') == 0
