"""
Each ELMo config allennlp-models ships in `training_config/`, with only its ELMo blocks swapped for
ELMo-C as `training_configs/downstream/README.md` says, trains an epoch on fixtures; its archive is
then evaluated and predicted with `allennlp evaluate` / `allennlp predict` in a fresh process from
another working directory, and evaluates to the loss the training run reported.

The configs here keep each recipe's readers, models, ELMo block options and structure; sizes are
tiny (the tiny biLM gives 12-d vectors), remote files (GloVe) are dropped, whitespace /
letters-digits tokenizers replace spaCy (whose models cannot be downloaded), and the constituency
parser runs without EVALB (a C program compiled on first use). `archive_file` is relative to the
training run's working directory, which the loading process does not share.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.util import import_module_and_submodules

from tests.conftest import SHARED_DATA
from tests.downstream.conftest import DOWNSTREAM_FIXTURES, REPO_ROOT

SHARED_FIXTURES = SHARED_DATA / "fixtures" / "allennlp_models"
ARCHIVE = "bilm/model.tar.gz"  # relative to the training run's working directory
BASE_PREDICTOR = "allennlp.predictors.predictor.Predictor"  # the task predictors load spaCy

ELMO_INDEXER = {"type": "elmoc_subwords", "archive_file": ARCHIVE}


def elmoc_embedder(**recipe_options) -> Dict[str, Any]:
    """The recipe's ELMo token embedder with its type and files swapped, its options kept."""
    return {"type": "elmoc_token_embedder", "archive_file": ARCHIVE, **recipe_options}


def lstm(input_size: int, hidden_size: int = 4, **options) -> Dict[str, Any]:
    return {"type": "lstm", "input_size": input_size, "hidden_size": hidden_size,
            "bidirectional": True, **options}


def feedforward(input_dim: int, hidden_dims, num_layers: int = 1, **options) -> Dict[str, Any]:
    return {"input_dim": input_dim, "num_layers": num_layers, "hidden_dims": hidden_dims,
            "activations": "relu", **options}


SCALAR_MIX_L2 = {"regexes": [[".*scalar_parameters.*", {"type": "l2", "alpha": 0.1}]]}


def esim_elmo() -> Dict[str, Any]:
    # pair_classification/esim_elmo: one ELMo at the input, no GloVe.
    snli = {"type": "snli", "tokenizer": {"type": "whitespace"},
            "token_indexers": {"elmo": ELMO_INDEXER}}
    return {
        "dataset_reader": snli,
        "train_data_path": str(DOWNSTREAM_FIXTURES / "snli_small_train.jsonl"),
        "validation_data_path": str(DOWNSTREAM_FIXTURES / "snli_small_dev.jsonl"),
        "model": {
            "type": "esim",
            "dropout": 0.5,
            "text_field_embedder": {"token_embedders": {
                "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0)}},
            "encoder": lstm(12),
            "matrix_attention": {"type": "dot_product"},
            "projection_feedforward": feedforward(32, 4),
            "inference_encoder": lstm(4),
            "output_feedforward": feedforward(32, 4, dropout=0.5),
            "output_logit": {"input_dim": 4, "num_layers": 1, "hidden_dims": 3,
                             "activations": "linear"},
        },
    }


def decomposable_attention_elmo() -> Dict[str, Any]:
    # pair_classification/decomposable_attention_elmo (its tokenizer's @@NULL@@ end token needs
    # spaCy; dropped).
    config = esim_elmo()
    config["model"] = {
        "type": "decomposable_attention",
        "text_field_embedder": {"token_embedders": {
            "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.2)}},
        "attend_feedforward": feedforward(12, 4, num_layers=2, dropout=0.2),
        "matrix_attention": {"type": "dot_product"},
        "compare_feedforward": feedforward(24, 4, num_layers=2, dropout=0.2),
        "aggregate_feedforward": {"input_dim": 8, "num_layers": 2, "hidden_dims": [4, 3],
                                  "activations": ["relu", "linear"], "dropout": [0.2, 0.0]},
    }
    return config


def bcn_elmo() -> Dict[str, Any]:
    # classification/biattentive_classification_network_elmo, with ELMo at the integrator output
    # too (use_integrator_output_elmo, two output representations).
    def sst(use_subtrees: bool) -> Dict[str, Any]:
        return {"type": "sst_tokens", "use_subtrees": use_subtrees, "granularity": "5-class",
                "token_indexers": {"tokens": {"type": "single_id"}, "elmo": ELMO_INDEXER}}

    return {
        "dataset_reader": sst(True),
        "validation_dataset_reader": sst(False),
        "train_data_path": str(DOWNSTREAM_FIXTURES / "sst.txt"),
        "validation_data_path": str(DOWNSTREAM_FIXTURES / "sst.txt"),
        "model": {
            "type": "bcn",
            "text_field_embedder": {"token_embedders": {
                "tokens": {"type": "embedding", "embedding_dim": 5, "trainable": False}}},
            "embedding_dropout": 0.5,
            "pre_encode_feedforward": feedforward(17, [4], dropout=[0.25], activations=["relu"]),
            "encoder": lstm(4),
            "integrator": lstm(24),
            "integrator_dropout": 0.1,
            # The recipe's block with options_file / weight_file replaced by archive_file.
            "elmo": {"archive_file": ARCHIVE, "do_layer_norm": False, "dropout": 0.0,
                     "num_output_representations": 2},
            "use_input_elmo": True,
            "use_integrator_output_elmo": True,
            "output_layer": {"input_dim": 80, "num_layers": 2, "output_dims": [4, 5],
                             "pool_sizes": 2, "dropout": [0.2, 0.0]},
        },
    }


def ner_elmo() -> Dict[str, Any]:
    # tagging/ner_elmo (GloVe dropped: its token embedding is trained from scratch).
    conll = str(DOWNSTREAM_FIXTURES / "conll2003.txt")
    return {
        "dataset_reader": {
            "type": "conll2003", "tag_label": "ner", "coding_scheme": "BIOUL",
            "token_indexers": {
                "tokens": {"type": "single_id", "lowercase_tokens": True},
                "token_characters": {"type": "characters", "min_padding_length": 3},
                "elmo": ELMO_INDEXER,
            },
        },
        "train_data_path": conll,
        "validation_data_path": conll,
        "model": {
            "type": "crf_tagger",
            "label_encoding": "BIOUL",
            "constrain_crf_decoding": True,
            "calculate_span_f1": True,
            "dropout": 0.5,
            "include_start_end_transitions": False,
            "text_field_embedder": {"token_embedders": {
                "tokens": {"type": "embedding", "embedding_dim": 4},
                "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0),
                "token_characters": {
                    "type": "character_encoding",
                    "embedding": {"embedding_dim": 4, "vocab_namespace": "token_characters"},
                    "encoder": {"type": "cnn", "embedding_dim": 4, "num_filters": 4,
                                "ngram_filter_sizes": [3], "conv_layer_activation": "relu"},
                },
            }},
            "encoder": lstm(20, num_layers=2, dropout=0.5),
            "regularizer": SCALAR_MIX_L2,
        },
    }


def srl_elmo() -> Dict[str, Any]:
    # structured_prediction/srl_elmo.
    return {
        "dataset_reader": {"type": "srl", "token_indexers": {"elmo": ELMO_INDEXER}},
        "train_data_path": str(DOWNSTREAM_FIXTURES / "srl_conll_2012"),
        "validation_data_path": str(DOWNSTREAM_FIXTURES / "srl_conll_2012" / "subdomain2"),
        "model": {
            "type": "srl",
            "text_field_embedder": {"token_embedders": {
                "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.1)}},
            "encoder": {"type": "alternating_lstm", "input_size": 14, "hidden_size": 4,
                        "num_layers": 2, "recurrent_dropout_probability": 0.1,
                        "use_input_projection_bias": False},
            "binary_feature_dim": 2,
            "regularizer": {"regexes": [[".*scalar_parameters.*",
                                         {"type": "l2", "alpha": 0.001}]]},
        },
    }


def bidaf_elmo() -> Dict[str, Any]:
    # rc/bidaf_elmo (GloVe dropped; letters-digits tokens keep the character offsets SQuAD needs).
    squad = str(SHARED_FIXTURES / "squad.json")
    return {
        "dataset_reader": {
            "type": "squad",
            "tokenizer": {"type": "letters_digits"},
            "token_indexers": {
                "tokens": {"type": "single_id", "lowercase_tokens": True},
                "elmo": ELMO_INDEXER,
                "token_characters": {
                    "type": "characters",
                    "character_tokenizer": {"byte_encoding": "utf-8", "start_tokens": [259],
                                            "end_tokens": [260]},
                    "min_padding_length": 5,
                },
            },
        },
        "train_data_path": squad,
        "validation_data_path": squad,
        "model": {
            "type": "bidaf",
            "text_field_embedder": {"token_embedders": {
                "tokens": {"type": "embedding", "embedding_dim": 4, "trainable": False},
                "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0),
                "token_characters": {
                    "type": "character_encoding",
                    "embedding": {"num_embeddings": 262, "embedding_dim": 4},
                    "encoder": {"type": "cnn", "embedding_dim": 4, "num_filters": 4,
                                "ngram_filter_sizes": [5]},
                    "dropout": 0.2,
                },
            }},
            "num_highway_layers": 1,
            "phrase_layer": lstm(20),
            "matrix_attention": {"type": "linear", "combination": "x,y,x*y",
                                 "tensor_1_dim": 8, "tensor_2_dim": 8},
            "modeling_layer": lstm(32, num_layers=2, dropout=0.2),
            "span_end_encoder": lstm(56),
            "dropout": 0.2,
        },
    }


def constituency_parser(elmo_block: Dict[str, Any]) -> Dict[str, Any]:
    trees = str(SHARED_FIXTURES / "example_ptb.trees")
    return {
        "dataset_reader": {"type": "ptb_trees", "use_pos_tags": True,
                           "token_indexers": {"elmo": ELMO_INDEXER}},
        "train_data_path": trees,
        "validation_data_path": trees,
        "model": {
            "type": "constituency_parser",
            "text_field_embedder": {"token_embedders": {"elmo": elmo_block}},
            "pos_tag_embedding": {"embedding_dim": 2, "vocab_namespace": "pos"},
            "encoder": lstm(14, num_layers=2, dropout=0.2),
            "feedforward": feedforward(8, 4, dropout=0.1),
            "span_extractor": {"type": "bidirectional_endpoint", "input_dim": 8},
            "evalb_directory_path": None,
        },
    }


def constituency_parser_elmo() -> Dict[str, Any]:
    # structured_prediction/constituency_parser_elmo.
    return constituency_parser(elmoc_embedder(dropout=0.2, do_layer_norm=False))


def constituency_parser_transformer_elmo() -> Dict[str, Any]:
    # structured_prediction/constituency_parser_transformer_elmo: its
    # bidirectional_lm_token_embedder block, type and archive_file swapped, options kept.
    return constituency_parser(elmoc_embedder(
        dropout=0.2, bos_eos_tokens=["<S>", "</S>"], remove_bos_eos=True, requires_grad=False
    ))


def coref_elmo() -> Dict[str, Any]:
    # coref/coref with ELMo-C as its token representation (the shipped SpanBERT cannot be
    # downloaded here): text 12-d, context 2 x 4, feature size 2.
    coref = str(DOWNSTREAM_FIXTURES / "coref.gold_conll")
    span_dim = 4 * 4 + 2 + 12
    return {
        "dataset_reader": {"type": "coref", "max_span_width": 3,
                           "token_indexers": {"elmo": ELMO_INDEXER}},
        "train_data_path": coref,
        "validation_data_path": coref,
        "model": {
            "type": "coref",
            "text_field_embedder": {"token_embedders": {
                "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0)}},
            "context_layer": lstm(12),
            "mention_feedforward": feedforward(span_dim, 4),
            "antecedent_feedforward": feedforward(3 * span_dim + 2, 4),
            "feature_size": 2,
            "max_span_width": 3,
            "spans_per_word": 0.4,
            "max_antecedents": 5,
            "lexical_dropout": 0.5,
        },
    }


# config -> (its builder, predictor, whether it needs ../shared fixtures)
FAMILIES: Dict[str, Any] = {
    "pair_classification/esim_elmo": (esim_elmo, "textual_entailment", False),
    "pair_classification/decomposable_attention_elmo": (
        decomposable_attention_elmo, "textual_entailment", False),
    "classification/biattentive_classification_network_elmo": (
        bcn_elmo, "text_classifier", False),
    "tagging/ner_elmo": (ner_elmo, BASE_PREDICTOR, False),
    "structured_prediction/srl_elmo": (srl_elmo, BASE_PREDICTOR, False),
    "rc/bidaf_elmo": (bidaf_elmo, "reading_comprehension", True),
    "structured_prediction/constituency_parser_elmo": (
        constituency_parser_elmo, BASE_PREDICTOR, True),
    "structured_prediction/constituency_parser_transformer_elmo": (
        constituency_parser_transformer_elmo, BASE_PREDICTOR, True),
    "coref/coref": (coref_elmo, BASE_PREDICTOR, False),
}

# Runs `allennlp <argv>` for each argv of argv[1] (JSON), in this one fresh process.
RUN_COMMANDS = """
import json, sys
from allennlp.commands import main
for argv in json.loads(sys.argv[1]):
    sys.argv = ["allennlp"] + argv
    main()
"""


@pytest.fixture(scope="module", autouse=True)
def registered():
    import_module_and_submodules("allennlp_models")
    import_module_and_submodules("elmoc_allennlp")


@pytest.fixture(scope="module")
def workspace(relocated_archive, tmp_path_factory) -> Path:
    """A working directory with the biLM at `bilm/model.tar.gz` and its .bin in `fasttext/`."""
    work = tmp_path_factory.mktemp("allennlp_models_configs")
    shutil.copytree(relocated_archive.parent, work / "bilm")
    shutil.copytree(relocated_archive.parent.parent / "fasttext", work / "fasttext")
    return work


def _shipped_training(config: Dict[str, Any]) -> Dict[str, Any]:
    # One batch, one epoch: the evaluation below sees the batches training validated on.
    return {**config,
            "data_loader": {"batch_size": 64},
            "trainer": {"num_epochs": 1, "optimizer": {"type": "adam"}, "cuda_device": -1}}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_swapped_config_trains_evaluates_and_predicts_from_another_directory(
    family, workspace, tmp_path, monkeypatch
):
    build, predictor, needs_shared = FAMILIES[family]
    if needs_shared and not SHARED_FIXTURES.is_dir():
        pytest.skip(f"{SHARED_FIXTURES} is absent")
    config = _shipped_training(build())
    if config["dataset_reader"]["type"] == "ptb_trees":
        # NLTK's corpus readers only open files under its data roots (NLTK_DATA).
        data_folder = str(Path(config["train_data_path"]).parent)
        monkeypatch.setenv("NLTK_DATA", data_folder)
    monkeypatch.chdir(workspace)
    run = workspace / "runs" / family.replace("/", "__")
    train_model(Params(json.loads(json.dumps(config))), str(run))
    trained_metrics = json.loads((run / "metrics.json").read_text())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = config["validation_data_path"]
    archive = str(run / "model.tar.gz")
    commands = [
        ["evaluate", archive, data, "--output-file", "metrics.json", "--cuda-device", "-1",
         "--include-package", "elmoc_allennlp"],
        ["predict", archive, data, "--use-dataset-reader", "--predictor", predictor,
         "--output-file", "predictions.jsonl", "--silent", "--cuda-device", "-1",
         "--include-package", "elmoc_allennlp"],
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-c", RUN_COMMANDS, json.dumps(commands)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]

    evaluated = json.loads((elsewhere / "metrics.json").read_text())
    assert evaluated["loss"] == pytest.approx(
        trained_metrics["validation_loss"], rel=1e-4, abs=1e-5
    )
    predictions = [json.loads(line) for line in
                   (elsewhere / "predictions.jsonl").read_text().splitlines() if line.strip()]
    assert predictions
    assert all(isinstance(prediction, dict) and prediction for prediction in predictions)
