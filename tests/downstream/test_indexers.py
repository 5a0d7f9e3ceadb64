"""The vocabulary-free indexer of a biLM archive (`elmoc_bilm_inputs`): the pretraining ids, cut and
lowercased as in pretraining, beside other indexers of a text field."""

import pickle

import numpy
import pytest
import torch

from allennlp.data import Batch, Instance, Token, Vocabulary
from allennlp.data.fields import TextField
from allennlp.nn.util import get_text_field_mask

from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.downstream.archive import BilmArchive
from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from tests.conftest import rewrite_archive

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_indexer_is_vocabulary_free_and_matches_the_pretraining_indexer(
    elmoc_archive, indexer, tiny_fasttext_path
):
    tokens = [Token(text) for text in ["the", "cat", "unseenword", ""]]
    counter = {}
    indexer.count_vocab_items(tokens[0], counter)
    assert counter == {}
    indexed = indexer.tokens_to_indices(tokens, Vocabulary())
    assert set(indexed) == {"elmo_tokens"}
    pretraining = FastTextSubwordIndexer(str(tiny_fasttext_path))
    expected = pretraining.tokens_to_indices(tokens, Vocabulary())["subword_ids"]
    assert indexed["elmo_tokens"] == expected
    restored = pickle.loads(pickle.dumps(indexer))
    assert restored.tokens_to_indices(tokens, Vocabulary()) == indexed


def test_tokens_are_cut_as_in_pretraining(elmoc_archive, indexer, tmp_path):
    def cut_long_tokens(config):
        config["dataset_reader"]["max_token_characters"] = 4

    cutting = BilmArchiveIndexer.from_archive(
        str(rewrite_archive(elmoc_archive, tmp_path / "cut.tar.gz", cut_long_tokens))
    )
    tokens = [Token("unseenword"), Token("cat")]
    assert cutting.tokens_to_indices(tokens, Vocabulary()) == indexer.tokens_to_indices(
        [Token("unse"), Token("cat")], Vocabulary()
    )
    ids = indexed_batch(cutting, [["unseenword", "cat"]])
    assert torch.equal(ids, indexed_batch(indexer, [["unse", "cat"]]))


def test_lowercasing_follows_pretraining_unless_overridden(elmoc_archive, indexer, tmp_path):
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    def pretraining_lowercases(value):
        def rewrite(config):
            config["dataset_reader"]["token_indexers"]["fasttext"]["lowercase_tokens"] = value

        return rewrite

    lowered_archive = rewrite_archive(
        elmoc_archive, tmp_path / "lower.tar.gz", pretraining_lowercases(True)
    )
    cased_archive = rewrite_archive(
        elmoc_archive, tmp_path / "cased.tar.gz", pretraining_lowercases(False)
    )
    assert BilmArchive(lowered_archive).lowercase_tokens
    assert not BilmArchive(cased_archive).lowercase_tokens
    # Not recorded: pretraining's indexer followed its fastText model, trained on lowercased text.
    assert BilmArchive(elmoc_archive).lowercase_tokens
    cased, lower = [Token("The"), Token("CAT")], [Token("the"), Token("cat")]
    keeping = BilmArchiveIndexer.from_archive(str(cased_archive))
    inherited = BilmArchiveIndexer.from_archive(str(lowered_archive))
    assert inherited.tokens_to_indices(cased, Vocabulary()) == keeping.tokens_to_indices(
        lower, Vocabulary()
    )
    assert indexer.tokens_to_indices(cased, Vocabulary()) == keeping.tokens_to_indices(
        lower, Vocabulary()
    )
    assert keeping.tokens_to_indices(cased, Vocabulary()) != keeping.tokens_to_indices(
        lower, Vocabulary()
    )
    overridden = BilmArchiveIndexer.from_archive(str(lowered_archive), lowercase_tokens=False)
    assert overridden.tokens_to_indices(cased, Vocabulary()) == keeping.tokens_to_indices(
        cased, Vocabulary()
    )
    # The Python API uses the archive's own indexer, so it lowercases too.
    api = ElmocEmbedder(str(lowered_archive))
    numpy.testing.assert_allclose(
        api.embed_sentence(["The", "CAT"]), api.embed_sentence(["the", "cat"]), atol=1e-6
    )
    assert not numpy.allclose(
        ElmocEmbedder(str(cased_archive)).embed_sentence(["The", "CAT"]),
        api.embed_sentence(["the", "cat"]),
        atol=1e-4,
    )


def test_text_field_mask_and_padding_with_and_without_another_masked_indexer(
    elmoc_archive, indexer, tiny_fasttext_path
):
    for indexers in (
        {"elmo": indexer},
        {"elmo": indexer, "words": FastTextSubwordIndexer(str(tiny_fasttext_path))},
    ):
        instances = [
            Instance({"tokens": TextField([Token(t) for t in sentence], indexers)})
            for sentence in (["a", "b", "c"], ["d"])
        ]
        batch = Batch(instances)
        batch.index_instances(Vocabulary())
        tensors = batch.as_tensor_dict()["tokens"]
        assert tensors["elmo"]["elmo_tokens"].shape[:2] == (2, 3)
        assert get_text_field_mask(tensors).tolist() == [[True] * 3, [True, False, False]]
