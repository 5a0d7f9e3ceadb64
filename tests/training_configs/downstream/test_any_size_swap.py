"""
A biLM of any size swaps into allennlp-models' ELMo configs, whose sizes assume ELMo's 1024-d
output, with only the ELMo blocks edited: the block's `projection_dim: 1024` (the token
embedder's, or `ElmocElmo`'s for a model-level `elmo` block) makes a 256-d biLM give 1024.
"""

import json
from typing import Any, Dict

import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import import_module_and_submodules
from allennlp.data import Batch, DatasetReader, Vocabulary
from allennlp.models import Model

from elmoc_allennlp.downstream.archive import BilmArchive
from tests.conftest import FIXTURES_ROOT
from tests.downstream.conftest import DOWNSTREAM_FIXTURES, REPO_ROOT

ELMO_DIM = 1024  # what allennlp-models' ELMo configs are sized for


@pytest.fixture(scope="module")
def bilm_256(tiny_fasttext_path, tmp_path_factory) -> str:
    """A tiny biLM with 256-d representations (projection 128), trained for one epoch."""
    from allennlp.commands.train import train_model_from_file

    import_module_and_submodules("elmoc_allennlp")
    config = tmp_path_factory.mktemp("bilm_256") / "bilm_256.jsonnet"
    tiny = (FIXTURES_ROOT / "elmoc_tiny.jsonnet").read_text()
    tiny = tiny.replace("'../../training_configs/", f"'{REPO_ROOT}/training_configs/")
    config.write_text(tiny.replace("projection_dim: 6", "projection_dim: 128"))
    serialization_dir = config.parent / "run"
    train_model_from_file(
        str(config), str(serialization_dir), overrides=json.dumps({"trainer.num_epochs": 1})
    )
    archive = serialization_dir / "model.tar.gz"
    assert BilmArchive(archive).output_dim == 256
    return str(archive)


def ner_elmo(archive: str, **block) -> Dict[str, Any]:
    # tagging/ner_elmo.jsonnet: 50-d words + 128-d character CNN + ELMo -> input_size 1202.
    elmo = {
        "type": "elmoc_token_embedder",
        "archive_file": archive,
        "do_layer_norm": False,
        "dropout": 0.0,
        **block,
    }
    return {
        "dataset_reader": {
            "type": "conll2003",
            "tag_label": "ner",
            "coding_scheme": "BIOUL",
            "token_indexers": {
                "tokens": {"type": "single_id", "lowercase_tokens": True},
                "token_characters": {"type": "characters", "min_padding_length": 3},
                "elmo": {"type": "elmoc_bilm_inputs", "archive_file": archive},
            },
        },
        "model": {
            "type": "crf_tagger",
            "label_encoding": "BIOUL",
            "dropout": 0.5,
            "include_start_end_transitions": False,
            "text_field_embedder": {
                "token_embedders": {
                    "tokens": {"type": "embedding", "embedding_dim": 50, "trainable": True},
                    "elmo": elmo,
                    # The recipe sizes this from its large 'tokens' namespace; these few sentences need their own.
                    "token_characters": {
                        "type": "character_encoding",
                        "embedding": {"embedding_dim": 16, "vocab_namespace": "token_characters"},
                        "encoder": {
                            "type": "cnn",
                            "embedding_dim": 16,
                            "num_filters": 128,
                            "ngram_filter_sizes": [3],
                            "conv_layer_activation": "relu",
                        },
                    },
                }
            },
            "encoder": {
                "type": "lstm",
                "input_size": 50 + 128 + ELMO_DIM,
                "hidden_size": 200,
                "num_layers": 2,
                "dropout": 0.5,
                "bidirectional": True,
            },
        },
        "data": str(DOWNSTREAM_FIXTURES / "conll2003.txt"),
    }


def bcn_elmo(archive: str, **block) -> Dict[str, Any]:
    # classification/biattentive_classification_network_elmo.jsonnet: 300-d words + ELMo at the
    # input (1324), ELMo beside the integrator's 600-d output, pooled four ways (4 * 1624).
    elmo = {
        "archive_file": archive,
        "do_layer_norm": False,
        "dropout": 0.0,
        "num_output_representations": 2,
        **block,
    }
    return {
        "dataset_reader": {
            "type": "sst_tokens",
            "granularity": "5-class",
            "tokenizer": {"type": "whitespace"},
            "token_indexers": {
                "tokens": {"type": "single_id", "lowercase_tokens": True},
                "elmo": {"type": "elmoc_bilm_inputs", "archive_file": archive},
            },
        },
        "model": {
            "type": "bcn",
            "text_field_embedder": {
                "token_embedders": {"tokens": {"type": "embedding", "embedding_dim": 300}}
            },
            "embedding_dropout": 0.5,
            "pre_encode_feedforward": {
                "input_dim": 300 + ELMO_DIM,
                "num_layers": 1,
                "hidden_dims": [300],
                "activations": ["relu"],
                "dropout": [0.25],
            },
            "encoder": {
                "type": "lstm",
                "input_size": 300,
                "hidden_size": 300,
                "num_layers": 1,
                "bidirectional": True,
            },
            "integrator": {
                "type": "lstm",
                "input_size": 1800,
                "hidden_size": 300,
                "num_layers": 1,
                "bidirectional": True,
            },
            "integrator_dropout": 0.1,
            "elmo": elmo,
            "use_input_elmo": True,
            "use_integrator_output_elmo": True,
            "output_layer": {
                "input_dim": 4 * (600 + ELMO_DIM),
                "num_layers": 3,
                "output_dims": [1200, 600, 5],
                "pool_sizes": 4,
                "dropout": [0.2, 0.3, 0.0],
            },
        },
        "data": str(DOWNSTREAM_FIXTURES / "sst.txt"),
        "labels": ["0", "1", "2", "3", "4"],
    }


def _loss(config: Dict[str, Any]) -> torch.Tensor:
    import_module_and_submodules("allennlp_models.tagging")
    import_module_and_submodules("allennlp_models.classification")
    reader = DatasetReader.from_params(Params(config["dataset_reader"]))
    instances = list(reader.read(config["data"]))
    vocabulary = Vocabulary.from_instances(instances)
    vocabulary.add_tokens_to_namespace(
        config.get("labels", []), "labels"
    )  # classes the fixture lacks
    instances = instances[:4]
    model = Model.from_params(vocab=vocabulary, params=Params(config["model"]))
    batch = Batch(instances)
    batch.index_instances(vocabulary)
    loss = model(**batch.as_tensor_dict())["loss"]
    loss.backward()
    return loss


@pytest.mark.parametrize("recipe", [ner_elmo, bcn_elmo])
def test_a_256d_bilm_fits_a_1024d_recipe_with_the_blocks_projection_dim(bilm_256, recipe):
    loss = _loss(recipe(bilm_256, projection_dim=ELMO_DIM))
    assert torch.isfinite(loss)
    # Without it the recipe's sizes do not fit: the same config fails.
    with pytest.raises(ConfigurationError):
        _loss(recipe(bilm_256))
