import copy
import logging
import pickle
from collections import defaultdict

import numpy as np
import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Token, TokenIndexer, Vocabulary

from elmoc_allennlp.data.token_indexers import fasttext_subword_indexer as indexer_module
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.fasttext.vectors import FastTextVectors


def _tokens(*texts):
    return [Token(text) for text in texts]


def _model(tmp_path, words, minn=2, maxn=4, bucket=30, name="model.bin"):
    matrix = np.zeros((len(words) + bucket, 4), dtype=np.float32)
    return str(
        write_fasttext_bin(
            tmp_path / name, list(words), matrix, minn=minn, maxn=maxn, bucket=bucket
        )
    )


class TestFastTextSubwordIndexer:
    def test_indices_are_fasttext_subword_ids_plus_one(self, tiny_fasttext_path):
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path))
        vectors = FastTextVectors.from_path(tiny_fasttext_path)
        assert indexer.vectors is vectors
        texts = ["the", "bank", "unseenword", "café", "日本語", ""]
        indexed = indexer.tokens_to_indices(_tokens(*texts), Vocabulary())
        assert set(indexed) == {"subword_ids", "mask"}
        assert indexed["mask"] == [True] * len(texts)
        for text, ids in zip(texts, indexed["subword_ids"]):
            expected = [i + 1 for i in vectors.subword_ids(text)] or [indexer.no_vector_id]
            assert ids == expected, text
            assert isinstance(ids, list)
        assert indexed["subword_ids"][0][0] == vectors.word_id("the") + 1

    def test_boundary_tokens_are_fasttext_eos(self, tiny_fasttext_path):
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path))
        eos = [FastTextVectors.from_path(tiny_fasttext_path).word_id("</s>") + 1]
        indexed = indexer.tokens_to_indices(_tokens("<S>", "the", "</S>", "</s>"), Vocabulary())
        assert indexed["subword_ids"][0] == indexed["subword_ids"][2] == eos
        assert indexed["subword_ids"][3] == eos  # fastText's own EOS word, no n-grams
        assert indexer.token_ids("<S>") == eos

        custom = FastTextSubwordIndexer(str(tiny_fasttext_path), boundary_tokens=["@@"])
        indexed = custom.tokens_to_indices(_tokens("@@", "<S>"), Vocabulary())
        assert indexed["subword_ids"][0] == eos
        assert indexed["subword_ids"][1] != eos  # no longer a boundary token

    def test_lowercase_tokens(self, tiny_fasttext_path):
        cased = FastTextSubwordIndexer(str(tiny_fasttext_path), lowercase_tokens=False)
        lowering = FastTextSubwordIndexer(str(tiny_fasttext_path), lowercase_tokens=True)
        assert lowering.lowercase_tokens and not cased.lowercase_tokens
        assert lowering != cased
        indexed = lowering.tokens_to_indices(_tokens("The", "CAT", "<S>"), Vocabulary())
        expected = cased.tokens_to_indices(_tokens("the", "cat", "<S>"), Vocabulary())
        assert indexed == expected
        assert cased.token_ids("The") != cased.token_ids("the")
        assert lowering.token_ids("The") == cased.token_ids("the")
        from_params = TokenIndexer.from_params(
            Params(
                {
                    "type": "elmoc_fasttext_subwords",
                    "vectors_path": str(tiny_fasttext_path),
                    "lowercase_tokens": True,
                }
            )
        )
        assert from_params.token_ids("CAT") == cased.token_ids("cat")
        restored = pickle.loads(pickle.dumps(lowering))
        assert restored.token_ids("The") == cased.token_ids("the")

    def test_by_default_follows_whether_the_model_is_lowercased(
        self, tiny_fasttext_path, tmp_path, caplog, monkeypatch
    ):
        monkeypatch.setattr(
            indexer_module, "_LOGGED", set()
        )  # each decision is logged once per process
        # The tiny model is trained on lowercased text: its task tokens are lowercased, and the log says so.
        with caplog.at_level(
            logging.INFO, logger="elmoc_allennlp.data.token_indexers.fasttext_subword_indexer"
        ):
            following = FastTextSubwordIndexer(str(tiny_fasttext_path))
        assert following.lowercase_tokens and following.follows_model
        assert following.token_ids("The") == following.token_ids("the")
        case = FastTextVectors.from_path(tiny_fasttext_path).case
        assert case.lowercased is True and case.cased_words == 0 and case.words > 100
        assert (
            f"lowercases tokens (as the model; the model {tiny_fasttext_path} is trained on lowercased text"
            in (caplog.text)
        )
        # A cased dictionary: the case is kept.
        words = ["</s>"] + [f"word{i}" for i in range(150)] + [f"Name{i}" for i in range(50)]
        cased_model = _model(tmp_path, words, name="cased.bin")
        caplog.clear()
        with caplog.at_level(
            logging.INFO, logger="elmoc_allennlp.data.token_indexers.fasttext_subword_indexer"
        ):
            keeping = FastTextSubwordIndexer(cased_model)
        assert not keeping.lowercase_tokens and keeping.follows_model
        assert keeping.token_ids("Name3") != keeping.token_ids("name3")
        assert "keeps the case of tokens (as the model" in caplog.text
        assert "trained on cased text (25.0% of its 200 words are cased)" in caplog.text
        # Too few words to tell: the case is kept.
        small = FastTextSubwordIndexer(_model(tmp_path, ["</s>", "the", "cat"], name="small.bin"))
        assert small.vectors.case.lowercased is None and not small.lowercase_tokens

    def test_case_forced_against_the_model_warns_with_figures(
        self, tiny_fasttext_path, tmp_path, caplog, monkeypatch
    ):
        logger_name = "elmoc_allennlp.data.token_indexers.fasttext_subword_indexer"
        monkeypatch.setattr(FastTextSubwordIndexer, "case_check_tokens", 10)
        forced = FastTextSubwordIndexer(str(tiny_fasttext_path), lowercase_tokens=False)
        vectors = FastTextVectors.from_path(tiny_fasttext_path)
        known = [word for word in vectors.words if word.isalpha()][:8]
        texts = [word.capitalize() for word in known[:4]] + known[4:8] + ["Unseenname", "zebra"]
        with caplog.at_level(logging.WARNING, logger=logger_name):
            forced.tokens_to_indices(
                _tokens(*texts, *texts), Vocabulary()
            )  # distinct tokens count once
        warnings = [
            record.getMessage() for record in caplog.records if record.levelno == logging.WARNING
        ]
        assert len(warnings) == 1
        assert (
            "but lowercase_tokens is false: 50.0% of the first 10 distinct tokens are cased"
            in warnings[0]
        )
        assert (
            "0.0% of those are whole words of the model as written, 80.0% once lowercased"
            in warnings[0]
        )
        assert "set lowercase_tokens to true" in warnings[0]
        # Following the model, or forcing what the model is: no warning.
        caplog.clear()
        for indexer in (
            FastTextSubwordIndexer(str(tiny_fasttext_path)),
            FastTextSubwordIndexer(str(tiny_fasttext_path), lowercase_tokens=True),
        ):
            with caplog.at_level(logging.WARNING, logger=logger_name):
                indexer.tokens_to_indices(_tokens(*texts), Vocabulary())
        assert not [record for record in caplog.records if record.levelno == logging.WARNING]
        # A cased model lowercased on purpose warns too.
        words = ["</s>"] + [f"word{i}" for i in range(150)] + [f"Name{i}" for i in range(50)]
        lowering = FastTextSubwordIndexer(
            _model(tmp_path, words, name="cased.bin"), lowercase_tokens=True
        )
        monkeypatch.setattr(FastTextSubwordIndexer, "case_check_tokens", 4)
        with caplog.at_level(logging.WARNING, logger=logger_name):
            lowering.tokens_to_indices(_tokens("Name1", "Name2", "word1", "Other"), Vocabulary())
        assert (
            "is trained on cased text (25.0% of its 200 words are cased), but lowercase_tokens is true: 75.0% of"
            in (caplog.text)
        )
        assert (
            "66.7% of those are whole words of the model as written, 0.0% once lowercased"
            in caplog.text
        )
        # What was indexed is not configuration.
        assert forced == FastTextSubwordIndexer(str(tiny_fasttext_path), lowercase_tokens=False)

    def test_boundary_fallback_without_eos_word(self, tmp_path):
        path = _model(tmp_path, ["the", "cat"])
        vectors = FastTextVectors.from_path(path)
        indexer = FastTextSubwordIndexer(path)
        indexed = indexer.tokens_to_indices(_tokens("<S>", "</S>"), Vocabulary())
        assert indexed["subword_ids"] == [
            [i + 1 for i in vectors.subword_ids("<S>")],
            [i + 1 for i in vectors.subword_ids("</S>")],
        ]

    def test_tokens_without_any_vector_get_the_reserved_id(self, tmp_path):
        path = _model(tmp_path, ["</s>", "the"], minn=0, maxn=0, bucket=0)
        indexer = FastTextSubwordIndexer(path)
        assert indexer.no_vector_id == 2 + 1  # num_rows + 1
        indexed = indexer.tokens_to_indices(_tokens("the", "dog", ""), Vocabulary())
        assert indexed["subword_ids"] == [[2], [3], [3]]
        assert indexed["mask"] == [True, True, True]

    def test_padding(self, tiny_fasttext_path):
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path), token_min_padding_length=5)
        indexed = indexer.tokens_to_indices(_tokens("<S>", "bank", "rates"), Vocabulary())
        lengths = indexer.get_padding_lengths(indexed)
        longest = max(len(ids) for ids in indexed["subword_ids"])
        assert lengths == {"num_tokens": 5, "num_subwords": longest}
        padded = indexer.as_padded_tensor_dict(
            indexed, {"num_tokens": 6, "num_subwords": longest + 2}
        )
        ids, mask = padded["subword_ids"], padded["mask"]
        assert ids.dtype == torch.long and ids.shape == (6, longest + 2)
        assert mask.tolist() == [True, True, True, False, False, False]
        for row, expected in enumerate(indexed["subword_ids"]):
            assert ids[row, : len(expected)].tolist() == expected
            assert (ids[row, len(expected) :] == 0).all()
        assert (ids[3:] == 0).all()
        # Shorter padding lengths truncate.
        short = indexer.as_padded_tensor_dict(indexed, {"num_tokens": 2, "num_subwords": 1})
        assert short["subword_ids"].tolist() == [
            [indexed["subword_ids"][0][0]],
            [indexed["subword_ids"][1][0]],
        ]
        assert short["mask"].tolist() == [True, True]

    def test_empty_token_list(self, tiny_fasttext_path):
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path))
        empty = indexer.get_empty_token_list()
        assert empty == {"subword_ids": [], "mask": []}
        assert indexer.get_padding_lengths(empty) == {"num_tokens": 0, "num_subwords": 1}
        padded = indexer.as_padded_tensor_dict(empty, {"num_tokens": 2, "num_subwords": 3})
        assert padded["subword_ids"].tolist() == [[0, 0, 0], [0, 0, 0]]
        assert padded["mask"].tolist() == [False, False]

    def test_vocabulary_free(self, tiny_fasttext_path):
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path))
        counter = defaultdict(lambda: defaultdict(int))
        indexer.count_vocab_items(Token("the"), counter)
        assert counter == {}
        assert indexer.tokens_to_indices(_tokens("the"), None)["subword_ids"]

    def test_from_params(self, tiny_fasttext_path):
        indexer = TokenIndexer.from_params(
            Params(
                {
                    "type": "elmoc_fasttext_subwords",
                    "vectors_path": str(tiny_fasttext_path),
                    "boundary_tokens": ["<S>"],
                }
            )
        )
        assert isinstance(indexer, FastTextSubwordIndexer)
        assert indexer.vectors is FastTextVectors.from_path(tiny_fasttext_path)
        assert indexer == FastTextSubwordIndexer(str(tiny_fasttext_path), boundary_tokens=["<S>"])
        assert indexer != FastTextSubwordIndexer(str(tiny_fasttext_path))

    def test_pickle_and_deepcopy(self, tiny_fasttext_path):
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path))
        tokens = _tokens("<S>", "the", "zebra", "</S>")
        expected = indexer.tokens_to_indices(tokens, Vocabulary())
        payload = pickle.dumps(indexer)
        assert len(payload) < 2000  # the path, not the vectors
        for clone in (pickle.loads(payload), copy.deepcopy(indexer)):
            assert clone == indexer and clone.vectors is indexer.vectors
            assert clone.tokens_to_indices(tokens, Vocabulary()) == expected

    def test_bad_path_names_the_file(self, tmp_path):
        with pytest.raises(ConfigurationError, match="missing.bin: file not found"):
            FastTextSubwordIndexer(str(tmp_path / "missing.bin"))
