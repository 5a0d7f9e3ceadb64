"""A biLM archive read for downstream use (`BilmArchive`): its config without the weights, its
fastText model found beside it, and archives that are not a usable ELMo-C biLM refused naming the
file and the config key."""

import tarfile

import numpy
import pytest
import torch

from allennlp.common.checks import ConfigurationError

from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.downstream.archive import BilmArchive
from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from elmoc_allennlp.models import BidirectionalLanguageModel
from tests.conftest import rewrite_archive
from tests.downstream.conftest import SENTENCES, embed

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_archive_reads_the_config_without_the_weights(elmoc_archive, tiny_fasttext_path):
    archive = BilmArchive(str(elmoc_archive))
    assert archive.input_key == "fasttext"
    assert archive.num_layers == 3 and archive.output_dim == 12
    assert (archive.start_token, archive.end_token) == ("<S>", "</S>")
    assert archive.input_vectors_path == str(tiny_fasttext_path)


def test_the_archive_is_extracted_once_in_load(elmoc_archive, monkeypatch):
    """Its config, fastText locations and vocabulary are read from the tar, nothing else written; `load`
    extracts it, once."""
    from elmoc_allennlp.common.archives import extraction

    extractions = []
    extract = extraction.extract_archive
    monkeypatch.setattr(
        extraction, "extract_archive", lambda path: extractions.append(path) or extract(path)
    )
    archive = BilmArchive(str(elmoc_archive))
    with tarfile.open(elmoc_archive) as tar:
        namespaces = (
            tar.extractfile("vocabulary/non_padded_namespaces.txt").read().decode("utf-8").split()
        )
    assert archive.vocabulary_namespace("non_padded_namespaces") == {
        name: i + 1 for i, name in enumerate(namespaces)
    }
    assert extractions == []
    model, _ = archive.load()
    assert extractions == [str(elmoc_archive)] and isinstance(model, BidirectionalLanguageModel)


# ---------------------------------------------------------------------- bad input


def test_missing_or_non_archive_files(tmp_path):
    with pytest.raises(ConfigurationError, match=r"archive_file.*does not exist"):
        ElmocTokenEmbedder(str(tmp_path / "missing.tar.gz"))
    text = tmp_path / "model.tar.gz"
    text.write_text("not an archive")
    with pytest.raises(ConfigurationError, match="is not a readable model archive"):
        BilmArchiveIndexer.from_archive(str(text))


def test_an_archive_that_is_not_an_elmoc_bilm(elmoc_archive, tmp_path):
    def classifier(config):
        config["model"]["type"] = "basic_classifier"

    other = rewrite_archive(elmoc_archive, tmp_path / "classifier.tar.gz", classifier)
    with pytest.raises(ConfigurationError, match=r"not an ELMo-C biLM archive.*model\.type"):
        ElmocTokenEmbedder(str(other))

    def character_input(config):
        config["model"]["text_field_embedder"]["token_embedders"] = {
            "fasttext": {"type": "empty"},
            "elmo_characters": {"type": "character_encoding"},
        }

    # Character input is supported (ELMo), but only with the indexer it was pretrained with.
    cnn = rewrite_archive(elmoc_archive, tmp_path / "cnn.tar.gz", character_input)
    with pytest.raises(
        ConfigurationError, match=r"dataset_reader\.token_indexers\.elmo_characters"
    ):
        BilmArchiveIndexer.from_archive(str(cnn))

    def unsupported_input(config):
        config["model"]["text_field_embedder"]["token_embedders"]["fasttext"] = {
            "type": "pass_through",
            "hidden_dim": 16,
        }

    other_input = rewrite_archive(elmoc_archive, tmp_path / "other.tar.gz", unsupported_input)
    with pytest.raises(
        ConfigurationError, match=r"model\.text_field_embedder\.token_embedders\.fasttext"
    ):
        BilmArchiveIndexer.from_archive(str(other_input))


def test_missing_vectors_name_the_file_and_the_config_key(elmoc_archive, tmp_path):
    def point_nowhere(config):
        config["dataset_reader"]["token_indexers"]["fasttext"]["vectors_path"] = "/gone/ft.bin"
        embedders = config["model"]["text_field_embedder"]["token_embedders"]
        embedders["fasttext"]["vectors_path"] = "/gone/ft.bin"

    moved = rewrite_archive(elmoc_archive, tmp_path / "bilm" / "model.tar.gz", point_nowhere)
    with pytest.raises(ConfigurationError) as error:
        ElmocTokenEmbedder(str(moved))
    message = str(error.value)
    assert "/gone/ft.bin" in message
    assert "dataset_reader.token_indexers.fasttext.vectors_path" in message
    assert "vectors_path" in message and str(tmp_path / "bilm" / "ft.bin") in message
    with pytest.raises(ConfigurationError, match=r"nope\.bin \(vectors_path\) does not exist"):
        BilmArchiveIndexer.from_archive(str(moved), vectors_path=str(tmp_path / "nope.bin"))


def test_a_moved_archive_finds_its_vectors_relative_to_it(
    relocated_archive, elmoc_archive, indexer
):
    archive = BilmArchive(str(relocated_archive))
    assert archive.input_vectors_path == str(relocated_archive.parents[1] / "fasttext" / "tiny.bin")
    moved = ElmocTokenEmbedder(str(relocated_archive), dropout=0.0)
    original = ElmocTokenEmbedder(str(elmoc_archive), dropout=0.0)
    moved_indexer = BilmArchiveIndexer.from_archive(str(relocated_archive))
    assert torch.equal(embed(moved, moved_indexer, SENTENCES), embed(original, indexer, SENTENCES))


def test_vectors_of_the_wrong_dimension(elmoc_archive, tmp_path):
    words = ["</s>", "the", "cat"]
    wrong = write_fasttext_bin(
        tmp_path / "eight.bin", words, numpy.ones((3 + 10, 8)), minn=2, maxn=3, bucket=10
    )
    with pytest.raises(ConfigurationError, match=r"dimension 8.*model\.contextualizer\.input_dim"):
        ElmocTokenEmbedder(str(elmoc_archive), vectors_path=str(wrong))
