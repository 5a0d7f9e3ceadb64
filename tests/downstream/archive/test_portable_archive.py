"""
A downstream model trained with ELMo-C loads from its `model.tar.gz` alone (plus the fastText
`.bin`): from another working directory, in a fresh process, with the biLM archive deleted.
"""

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmoc_allennlp.common.archives import CARRIED_DIRECTORY
from elmoc_allennlp.downstream.archive import VECTORS_PATH_VARIABLE
from tests.downstream.conftest import DOWNSTREAM_FIXTURES, REPO_ROOT
from tests.fresh_process import run_python

SENTENCES = [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"]]

# Loads the archive given as argv[1] in this process and prints the tagger's logits as JSON.
PREDICT_SCRIPT = """
import json, sys
import elmoc_allennlp
from allennlp.models.archival import load_archive
from allennlp.predictors import Predictor
from allennlp.data.tokenizers import Token
archive = load_archive(sys.argv[1])
predictor = Predictor(archive.model, archive.dataset_reader)
sentences = json.loads(sys.argv[2])
reader = archive.dataset_reader
outputs = [
    predictor.predict_instance(reader.text_to_instance([Token(word) for word in words]))
    for words in sentences
]
print(json.dumps([output["logits"] for output in outputs]))
"""


def _tagger_config(archive_file: str, fasttext: str) -> Params:
    """
    allennlp-models' `tagging/ner_elmo` shape, tiny, with the ELMo blocks swapped and, as in
    `training_configs/downstream/`, the biLM's fastText vectors as the task's word vectors.
    """
    conll = str(DOWNSTREAM_FIXTURES / "conll2003.txt")
    return Params(
        {
            "dataset_reader": {
                "type": "conll2003",
                "tag_label": "ner",
                "coding_scheme": "BIOUL",
                "token_indexers": {
                    "elmo": {"type": "elmoc_bilm_inputs", "archive_file": archive_file},
                    "tokens": {"type": "elmoc_fasttext_subwords", "vectors_path": fasttext},
                },
            },
            "train_data_path": conll,
            "validation_data_path": conll,
            "model": {
                "type": "simple_tagger",
                "text_field_embedder": {
                    "token_embedders": {
                        "elmo": {
                            "type": "elmoc_token_embedder",
                            "archive_file": archive_file,
                            "dropout": 0.0,
                        },
                        "tokens": {"type": "elmoc_fasttext", "vectors_path": fasttext},
                    }
                },
                "encoder": {"type": "lstm", "input_size": 28, "hidden_size": 4},
            },
            "data_loader": {"batch_size": 8},
            "trainer": {"num_epochs": 1, "optimizer": "adam", "cuda_device": -1},
        }
    )


def _predict_in_fresh_process(archive: Path, cwd: Path, environment=None) -> list:
    env = {**os.environ, **(environment or {})}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    result = run_python(
        ["-c", PREDICT_SCRIPT, str(archive), json.dumps(SENTENCES)], cwd=cwd, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained_tagger(relocated_archive, tmp_path_factory):
    """
    A tagger trained in `<work>` with the relative `archive_file` `bilm/model.tar.gz` (the biLM
    finds its .bin in `<work>/fasttext/`) and that .bin as its word vectors (a relative
    `vectors_path`), then moved to `<moved>` with only the .bin; `<work>`
    (biLM archive and original .bin) is deleted. Returns (moved archive, moved .bin, logits
    computed in the training process before the move).
    """
    work = tmp_path_factory.mktemp("work")
    shutil.copytree(relocated_archive.parent.parent / "bilm", work / "bilm")
    shutil.copytree(relocated_archive.parent.parent / "fasttext", work / "fasttext")
    previous_cwd = os.getcwd()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    os.chdir(work)
    try:
        bin_name = next(Path("fasttext").iterdir()).name
        train_model(_tagger_config("bilm/model.tar.gz", f"fasttext/{bin_name}"), "run")
        archive = load_archive("run/model.tar.gz")
        from allennlp.predictors import Predictor

        predictor = Predictor(archive.model, archive.dataset_reader)
        from allennlp.data.tokenizers import Token

        reader = archive.dataset_reader
        expected = [
            predictor.predict_instance(reader.text_to_instance([Token(w) for w in words]))["logits"]
            for words in SENTENCES
        ]
    finally:
        os.chdir(previous_cwd)
        torch.set_num_threads(previous_threads)
    with tarfile.open(work / "run" / "model.tar.gz") as tar:
        names = tar.getnames()
    assert any(name.startswith(f"{CARRIED_DIRECTORY}/") for name in names), names
    moved = tmp_path_factory.mktemp("moved_downstream")
    shutil.move(str(work / "run" / "model.tar.gz"), moved / "model.tar.gz")
    shutil.move(str(work / "fasttext" / bin_name), moved / bin_name)
    shutil.rmtree(work)
    return moved / "model.tar.gz", moved / bin_name, expected


def test_moved_archive_predicts_the_same_from_another_directory(trained_tagger, tmp_path):
    """
    The moved archive predicts the logits of the training process, from another directory.

    It predicts in a fresh process (`tests/fresh_process.py`): only a new process shows nothing the
    training process held is needed.
    """
    archive, _, expected = trained_tagger
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    logits = _predict_in_fresh_process(archive, elsewhere)
    for got, want in zip(logits, expected):
        assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-5, rtol=1e-4)


def test_the_bin_anywhere_with_the_one_override(trained_tagger, tmp_path):
    """
    The archive alone, with the .bin renamed elsewhere and named by the one override, predicts the
    same.

    It predicts in a fresh process: the override is an environment variable read by a process that
    holds nothing from training.
    """
    archive, vectors, expected = trained_tagger
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(archive, alone / "model.tar.gz")
    other = tmp_path / "vectors_somewhere"
    other.mkdir()
    shutil.copy(vectors, other / "renamed.bin")
    # Relative to the working directory, as every ELMo-C path.
    logits = _predict_in_fresh_process(
        alone / "model.tar.gz", tmp_path, {VECTORS_PATH_VARIABLE: "vectors_somewhere/renamed.bin"}
    )
    for got, want in zip(logits, expected):
        assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-5, rtol=1e-4)


def test_missing_bin_names_the_downstream_archive_and_the_override(
    trained_tagger, tmp_path, monkeypatch
):
    archive, _, _ = trained_tagger
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(archive, alone / "model.tar.gz")
    monkeypatch.delenv(VECTORS_PATH_VARIABLE, raising=False)
    with pytest.raises(ConfigurationError) as error:
        load_archive(str(alone / "model.tar.gz"))
    message = str(error.value)
    assert str(alone / "model.tar.gz") in message
    assert "bilm/model.tar.gz (dataset_reader.token_indexers.elmo.archive_file)" in message
    assert VECTORS_PATH_VARIABLE in message


def test_the_copy_is_written_once_and_a_second_writer_keeps_the_first(relocated_archive, tmp_path):
    from elmoc_allennlp.downstream.archive import BilmArchive
    from allennlp.data import Vocabulary

    archive = BilmArchive(relocated_archive)
    vocabulary = Vocabulary()
    vocabulary.add_tokens_to_namespace(["the", "cat"], "tokens")
    archive.archive_file = "bilm.tar.gz"  # as a config names it
    first = archive.carry(tmp_path, vocabulary)
    written = (first / "config.json").read_text()
    second = archive.carry(tmp_path, Vocabulary())
    assert second == first and (first / "config.json").read_text() == written
    assert sorted(path.name for path in first.parent.iterdir()) == [first.name]  # no leftovers
    # The copy records absolute paths of the .bin it used; reading it needs no biLM archive.
    carried = BilmArchive("bilm.tar.gz", serialization_dir=tmp_path)
    assert Path(carried.input_vectors_path).is_absolute()
    assert carried.input_vectors_path == str(Path(archive.input_vectors_path).resolve())
    assert carried.boundary_tokens == archive.boundary_tokens
