"""
Each ELMo config allennlp-models ships in `training_config/`, with only its ELMo blocks swapped for
ELMo-C as `training_configs/downstream/README.md` says, trains an epoch on fixtures; its archive is
then evaluated and predicted with `allennlp evaluate` / `allennlp predict` in a fresh process from
another working directory with the biLM archive out of the way, and evaluates to the loss the
training run reported.

The configs here keep each recipe's readers, models, ELMo block options and structure; sizes are
tiny (the tiny biLM gives 12-d vectors), remote files (GloVe) are dropped, whitespace /
letters-digits tokenizers replace spaCy (whose models cannot be downloaded), and the constituency
parser runs without EVALB (a C program compiled on first use). `archive_file` is relative to the
training run's working directory, which the loading process does not share.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.util import import_module_and_submodules

from tests.conftest import SHARED_DATA
from tests.downstream.conftest import DOWNSTREAM_FIXTURES, REPO_ROOT
from tests.fresh_process import run_python

SHARED_FIXTURES = SHARED_DATA / "fixtures" / "allennlp_models"
ARCHIVE = "bilm/model.tar.gz"  # relative to the training run's working directory
BASE_PREDICTOR = "allennlp.predictors.predictor.Predictor"  # the task predictors load spaCy

ELMO_INDEXER = {"type": "elmoc_bilm_inputs", "archive_file": ARCHIVE}


def elmoc_embedder(**recipe_options) -> Dict[str, Any]:
    """The recipe's ELMo token embedder with its type and files swapped, its options kept."""
    return {"type": "elmoc_token_embedder", "archive_file": ARCHIVE, **recipe_options}


def lstm(input_size: int, hidden_size: int = 4, **options) -> Dict[str, Any]:
    return {
        "type": "lstm",
        "input_size": input_size,
        "hidden_size": hidden_size,
        "bidirectional": True,
        **options,
    }


def feedforward(input_dim: int, hidden_dims, num_layers: int = 1, **options) -> Dict[str, Any]:
    return {
        "input_dim": input_dim,
        "num_layers": num_layers,
        "hidden_dims": hidden_dims,
        "activations": "relu",
        **options,
    }


SCALAR_MIX_L2 = {"regexes": [[".*scalar_parameters.*", {"type": "l2", "alpha": 0.1}]]}


def esim_elmo() -> Dict[str, Any]:
    # pair_classification/esim_elmo: one ELMo at the input, no GloVe.
    snli = {
        "type": "snli",
        "tokenizer": {"type": "whitespace"},
        "token_indexers": {"elmo": ELMO_INDEXER},
    }
    return {
        "dataset_reader": snli,
        "train_data_path": str(DOWNSTREAM_FIXTURES / "snli_small_train.jsonl"),
        "validation_data_path": str(DOWNSTREAM_FIXTURES / "snli_small_dev.jsonl"),
        "model": {
            "type": "esim",
            "dropout": 0.5,
            "text_field_embedder": {
                "token_embedders": {"elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0)}
            },
            "encoder": lstm(12),
            "matrix_attention": {"type": "dot_product"},
            "projection_feedforward": feedforward(32, 4),
            "inference_encoder": lstm(4),
            "output_feedforward": feedforward(32, 4, dropout=0.5),
            "output_logit": {
                "input_dim": 4,
                "num_layers": 1,
                "hidden_dims": 3,
                "activations": "linear",
            },
        },
    }


def decomposable_attention_elmo() -> Dict[str, Any]:
    # pair_classification/decomposable_attention_elmo (its tokenizer's @@NULL@@ end token needs
    # spaCy; dropped).
    config = esim_elmo()
    config["model"] = {
        "type": "decomposable_attention",
        "text_field_embedder": {
            "token_embedders": {"elmo": elmoc_embedder(do_layer_norm=False, dropout=0.2)}
        },
        "attend_feedforward": feedforward(12, 4, num_layers=2, dropout=0.2),
        "matrix_attention": {"type": "dot_product"},
        "compare_feedforward": feedforward(24, 4, num_layers=2, dropout=0.2),
        "aggregate_feedforward": {
            "input_dim": 8,
            "num_layers": 2,
            "hidden_dims": [4, 3],
            "activations": ["relu", "linear"],
            "dropout": [0.2, 0.0],
        },
    }
    return config


def bcn_elmo() -> Dict[str, Any]:
    # classification/biattentive_classification_network_elmo, with ELMo at the integrator output
    # too (use_integrator_output_elmo, two output representations).
    def sst(use_subtrees: bool) -> Dict[str, Any]:
        return {
            "type": "sst_tokens",
            "use_subtrees": use_subtrees,
            "granularity": "5-class",
            "token_indexers": {"tokens": {"type": "single_id"}, "elmo": ELMO_INDEXER},
        }

    return {
        "dataset_reader": sst(True),
        "validation_dataset_reader": sst(False),
        "train_data_path": str(DOWNSTREAM_FIXTURES / "sst.txt"),
        "validation_data_path": str(DOWNSTREAM_FIXTURES / "sst.txt"),
        "model": {
            "type": "bcn",
            "text_field_embedder": {
                "token_embedders": {
                    "tokens": {"type": "embedding", "embedding_dim": 5, "trainable": False}
                }
            },
            "embedding_dropout": 0.5,
            "pre_encode_feedforward": feedforward(17, [4], dropout=[0.25], activations=["relu"]),
            "encoder": lstm(4),
            "integrator": lstm(24),
            "integrator_dropout": 0.1,
            # The recipe's block with options_file / weight_file replaced by archive_file.
            "elmo": {
                "archive_file": ARCHIVE,
                "do_layer_norm": False,
                "dropout": 0.0,
                "num_output_representations": 2,
            },
            "use_input_elmo": True,
            "use_integrator_output_elmo": True,
            "output_layer": {
                "input_dim": 80,
                "num_layers": 2,
                "output_dims": [4, 5],
                "pool_sizes": 2,
                "dropout": [0.2, 0.0],
            },
        },
    }


def ner_elmo() -> Dict[str, Any]:
    # tagging/ner_elmo (GloVe dropped: its token embedding is trained from scratch).
    conll = str(DOWNSTREAM_FIXTURES / "conll2003.txt")
    return {
        "dataset_reader": {
            "type": "conll2003",
            "tag_label": "ner",
            "coding_scheme": "BIOUL",
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
            "text_field_embedder": {
                "token_embedders": {
                    "tokens": {"type": "embedding", "embedding_dim": 4},
                    "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0),
                    "token_characters": {
                        "type": "character_encoding",
                        "embedding": {"embedding_dim": 4, "vocab_namespace": "token_characters"},
                        "encoder": {
                            "type": "cnn",
                            "embedding_dim": 4,
                            "num_filters": 4,
                            "ngram_filter_sizes": [3],
                            "conv_layer_activation": "relu",
                        },
                    },
                }
            },
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
            "text_field_embedder": {
                "token_embedders": {"elmo": elmoc_embedder(do_layer_norm=False, dropout=0.1)}
            },
            "encoder": {
                "type": "alternating_lstm",
                "input_size": 14,
                "hidden_size": 4,
                "num_layers": 2,
                "recurrent_dropout_probability": 0.1,
                "use_input_projection_bias": False,
            },
            "binary_feature_dim": 2,
            "regularizer": {"regexes": [[".*scalar_parameters.*", {"type": "l2", "alpha": 0.001}]]},
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
                    "character_tokenizer": {
                        "byte_encoding": "utf-8",
                        "start_tokens": [259],
                        "end_tokens": [260],
                    },
                    "min_padding_length": 5,
                },
            },
        },
        "train_data_path": squad,
        "validation_data_path": squad,
        "model": {
            "type": "bidaf",
            "text_field_embedder": {
                "token_embedders": {
                    "tokens": {"type": "embedding", "embedding_dim": 4, "trainable": False},
                    "elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0),
                    "token_characters": {
                        "type": "character_encoding",
                        "embedding": {"num_embeddings": 262, "embedding_dim": 4},
                        "encoder": {
                            "type": "cnn",
                            "embedding_dim": 4,
                            "num_filters": 4,
                            "ngram_filter_sizes": [5],
                        },
                        "dropout": 0.2,
                    },
                }
            },
            "num_highway_layers": 1,
            "phrase_layer": lstm(20),
            "matrix_attention": {
                "type": "linear",
                "combination": "x,y,x*y",
                "tensor_1_dim": 8,
                "tensor_2_dim": 8,
            },
            "modeling_layer": lstm(32, num_layers=2, dropout=0.2),
            "span_end_encoder": lstm(56),
            "dropout": 0.2,
        },
    }


def constituency_parser(elmo_block: Dict[str, Any]) -> Dict[str, Any]:
    trees = str(SHARED_FIXTURES / "example_ptb.trees")
    return {
        "dataset_reader": {
            "type": "ptb_trees",
            "use_pos_tags": True,
            "token_indexers": {"elmo": ELMO_INDEXER},
        },
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
    return constituency_parser(
        elmoc_embedder(
            dropout=0.2, bos_eos_tokens=["<S>", "</S>"], remove_bos_eos=True, requires_grad=False
        )
    )


def coref_elmo() -> Dict[str, Any]:
    # coref/coref with ELMo-C as its token representation (the shipped SpanBERT cannot be
    # downloaded here): text 12-d, context 2 x 4, feature size 2.
    coref = str(DOWNSTREAM_FIXTURES / "coref.gold_conll")
    span_dim = 4 * 4 + 2 + 12
    return {
        "dataset_reader": {
            "type": "coref",
            "max_span_width": 3,
            "token_indexers": {"elmo": ELMO_INDEXER},
        },
        "train_data_path": coref,
        "validation_data_path": coref,
        "model": {
            "type": "coref",
            "text_field_embedder": {
                "token_embedders": {"elmo": elmoc_embedder(do_layer_norm=False, dropout=0.0)}
            },
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
        decomposable_attention_elmo,
        "textual_entailment",
        False,
    ),
    "classification/biattentive_classification_network_elmo": (bcn_elmo, "text_classifier", False),
    "tagging/ner_elmo": (ner_elmo, BASE_PREDICTOR, False),
    "structured_prediction/srl_elmo": (srl_elmo, BASE_PREDICTOR, False),
    "rc/bidaf_elmo": (bidaf_elmo, "reading_comprehension", True),
    "structured_prediction/constituency_parser_elmo": (
        constituency_parser_elmo,
        BASE_PREDICTOR,
        True,
    ),
    "structured_prediction/constituency_parser_transformer_elmo": (
        constituency_parser_transformer_elmo,
        BASE_PREDICTOR,
        True,
    ),
    "coref/coref": (coref_elmo, BASE_PREDICTOR, False),
}

# Runs `allennlp <argv>` for each (name, argv) of argv[1] (JSON) in this one fresh process; prints
# {name: traceback} of those that failed.
RUN_COMMANDS = """
import json, sys, traceback
from allennlp.commands import main
failures = {}
for name, argv in json.loads(sys.argv[1]):
    sys.argv = ["allennlp"] + argv
    try:
        main()
    except BaseException:
        failures[name] = traceback.format_exc()[-3000:]
print(json.dumps(failures))
"""


@pytest.fixture(scope="module", autouse=True)
def registered():
    import_module_and_submodules("allennlp_models")
    import_module_and_submodules("elmoc_allennlp")


def _available(family: str) -> bool:
    return not FAMILIES[family][2] or SHARED_FIXTURES.is_dir()


def _one_epoch(config: Dict[str, Any]) -> Dict[str, Any]:
    # One batch, one epoch: the evaluation below sees the batches training validated on.
    return {
        **config,
        "data_loader": {"batch_size": 64},
        "trainer": {"num_epochs": 1, "optimizer": {"type": "adam"}, "cuda_device": -1},
    }


@pytest.fixture(scope="module")
def trained(relocated_archive, tmp_path_factory) -> Dict[str, Any]:
    """
    Every available family trained in one working directory (the biLM at `bilm/model.tar.gz`,
    its .bin in `fasttext/`): family -> (config, run folder, metrics) or the exception raised.

    Slow (most of ~21 s, once per module): every family's swapped config really trains an epoch,
    because what is checked is that the shipped recipes train with ELMo-C in place of ELMo.
    """
    work = tmp_path_factory.mktemp("allennlp_models_configs")
    shutil.copytree(relocated_archive.parent, work / "bilm")
    shutil.copytree(relocated_archive.parent.parent / "fasttext", work / "fasttext")
    previous_cwd, previous_threads = os.getcwd(), torch.get_num_threads()
    previous_nltk = os.environ.get("NLTK_DATA")
    # NLTK's corpus readers (ptb_trees) only open files under its data roots.
    os.environ["NLTK_DATA"] = str(SHARED_FIXTURES)
    os.chdir(work)
    torch.set_num_threads(1)
    runs: Dict[str, Any] = {}
    try:
        for family in sorted(filter(_available, FAMILIES)):
            config = _one_epoch(FAMILIES[family][0]())
            run = work / "runs" / family.replace("/", "__")
            try:
                train_model(Params(json.loads(json.dumps(config))), str(run))
            except Exception as error:  # reported by the family's test
                runs[family] = error
                continue
            runs[family] = (config, run, json.loads((run / "metrics.json").read_text()))
    finally:
        os.chdir(previous_cwd)
        torch.set_num_threads(previous_threads)
        if previous_nltk is None:
            os.environ.pop("NLTK_DATA", None)
        else:
            os.environ["NLTK_DATA"] = previous_nltk
    # Loading happens without the biLM archive: each downstream archive carries what it needs.
    shutil.rmtree(work / "bilm")
    return runs


@pytest.fixture(scope="module")
def loaded_elsewhere(trained, tmp_path_factory) -> Path:
    """
    `allennlp evaluate` and `predict` of every trained archive, from another directory.

    Slow (part of ~21 s, once per module): one fresh process runs them all, because loading the
    archives must not lean on anything the training process held (its working directory, imports).
    """
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    commands = []
    for family, run in trained.items():
        if isinstance(run, Exception):
            continue
        config, folder, _ = run
        name = family.replace("/", "__")
        data, archive = config["validation_data_path"], str(folder / "model.tar.gz")
        options = ["--cuda-device", "-1", "--include-package", "elmoc_allennlp"]
        commands.append(
            [
                f"{family} evaluate",
                ["evaluate", archive, data, "--output-file", f"{name}.metrics.json", *options],
            ]
        )
        commands.append(
            [
                f"{family} predict",
                [
                    "predict",
                    archive,
                    data,
                    "--use-dataset-reader",
                    "--predictor",
                    FAMILIES[family][1],
                    "--output-file",
                    f"{name}.predictions.jsonl",
                    "--silent",
                    *options,
                ],
            ]
        )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NLTK_DATA": str(SHARED_FIXTURES)}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = run_python(
        ["-c", RUN_COMMANDS, json.dumps(commands)], cwd=elsewhere, env=env, timeout=1200
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (elsewhere / "failures.json").write_text(result.stdout.strip().splitlines()[-1])
    return elsewhere


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_swapped_config_trains_evaluates_and_predicts_from_another_directory(
    family, trained, loaded_elsewhere
):
    """
    A family's swapped config trains, then evaluates to its training loss and predicts elsewhere.

    Slow (~21 s, in the module-scoped `trained` and `loaded_elsewhere` setup): each family really
    trains an epoch, then a fresh `allennlp` process evaluates and predicts from another directory,
    because only real runs show the recipes train and their archives load where they were not made.
    """
    if not _available(family):
        pytest.skip(f"{SHARED_FIXTURES} is absent")
    run = trained[family]
    if isinstance(run, Exception):
        raise run
    _, _, trained_metrics = run
    failures = json.loads((loaded_elsewhere / "failures.json").read_text())
    for command in ("evaluate", "predict"):
        assert f"{family} {command}" not in failures, failures[f"{family} {command}"]

    name = family.replace("/", "__")
    evaluated = json.loads((loaded_elsewhere / f"{name}.metrics.json").read_text())
    assert evaluated["loss"] == pytest.approx(
        trained_metrics["validation_loss"], rel=1e-4, abs=1e-5
    )
    lines = (loaded_elsewhere / f"{name}.predictions.jsonl").read_text().splitlines()
    predictions = [json.loads(line) for line in lines if line.strip()]
    assert predictions
    assert all(isinstance(prediction, dict) and prediction for prediction in predictions)
