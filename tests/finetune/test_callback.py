"""
`elmoc_finetune` at the end of a fine-tuning run with `training_configs/pretrain/finetune_domain.jsonnet`:
the new archive is an ordinary biLM archive for every downstream tool; at the start, a reader that
indexes with another fastText model is refused before training.
"""

import json
from pathlib import Path

import h5py
import numpy
import pytest
import torch

from allennlp.commands.evaluate import evaluate_from_archive
from allennlp.common.checks import ConfigurationError
from allennlp.data import Token, Vocabulary
from allennlp.models.archival import load_archive

from elmoc_allennlp.common import torch_versions
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from tests.conftest import LM_CORPUS
from tests.finetune.conftest import finetune

SENTENCE = ["the", "cat", "sat", "on", "the", "mat"]


def test_finetuned_archive_is_an_ordinary_bilm_archive(finetuned, tiny_fasttext_path):
    archive, serialization_dir = finetuned
    loaded = load_archive(str(archive))
    config = loaded.config.as_dict()
    assert config["model"]["type"] == "elmoc_bilm"
    assert "archive_file" not in json.dumps(config["model"])
    indexer = config["dataset_reader"]["token_indexers"]["fasttext"]
    assert indexer["type"] == "elmoc_fasttext_subwords"
    assert Path(indexer["vectors_path"]) == Path(tiny_fasttext_path)
    assert indexer.get("lowercase_tokens", False) is False
    original = json.loads((serialization_dir / "config_finetune.json").read_text())
    assert original["model"]["type"] == "elmoc_bilm_from_archive"
    # The archive holds the best epoch's weights.
    best = torch_versions.load_tensors(serialization_dir / "best.th")
    for name, value in loaded.model.state_dict().items():
        assert torch.equal(value, best[name]), name


def test_finetuned_archive_works_with_every_downstream_tool(base_archive, finetuned, tmp_path):
    archive, _ = finetuned
    tuned = ElmocEmbedder(str(archive))
    general = ElmocEmbedder(str(base_archive))
    tuned_layers = tuned.embed_sentence(SENTENCE)
    assert tuned_layers.shape == (3, len(SENTENCE), 12)
    # Fine-tuning changed the representations (all layers trained in the last epoch).
    assert numpy.abs(tuned_layers - general.embed_sentence(SENTENCE)).max() > 1e-4

    # The hdf5 export gives the API's vectors.
    sentences = tmp_path / "sentences.txt"
    sentences.write_text(" ".join(SENTENCE) + "\n", encoding="utf-8")
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    output = embed_file(str(archive), str(sentences), str(tmp_path / "out.hdf5"), "all")
    with h5py.File(output, "r") as hdf5:
        numpy.testing.assert_allclose(hdf5["0"][()], tuned_layers, atol=1e-5)

    # The token embedder of the downstream configs, with its indexer.
    indexer = BilmArchiveIndexer.from_archive(str(archive))
    embedder = ElmocTokenEmbedder(
        str(archive), dropout=0.0, scalar_mix_parameters=[-9e10, -9e10, 1]
    )
    indexed = indexer.tokens_to_indices([Token(word) for word in SENTENCE], Vocabulary())
    padded = indexer.as_padded_tensor_dict(indexed, indexer.get_padding_lengths(indexed))
    with torch.no_grad():
        top = embedder(padded["elmo_tokens"].unsqueeze(0))[0]
    numpy.testing.assert_allclose(top.numpy(), tuned_layers[2], atol=1e-5)

    # `allennlp evaluate` reads held-out text with the archive's own reader.
    metrics = evaluate_from_archive(str(archive), str(LM_CORPUS / "valid.txt"))
    assert 0.0 < metrics["loss"] < 2.0 and "retrieval_accuracy" in metrics


def test_a_reader_with_another_fasttext_model_is_refused_before_training(
    base_archive, other_fasttext, tmp_path, monkeypatch
):
    swapped = {
        "dataset_reader.token_indexers.fasttext": {
            "type": "elmoc_fasttext_subwords",
            "vectors_path": str(other_fasttext),
        }
    }
    with pytest.raises(
        ConfigurationError, match=r"dataset_reader\.token_indexers\.fasttext\.vectors_path"
    ):
        finetune(base_archive, tmp_path / "run", monkeypatch, swapped)
    assert not list((tmp_path / "run").glob("model_state_*"))
