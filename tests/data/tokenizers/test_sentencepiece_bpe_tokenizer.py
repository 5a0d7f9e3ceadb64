import pickle

import pytest

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data.tokenizers import Tokenizer

from elmoc_allennlp.data.tokenizers import sentencepiece_bpe_tokenizer as bpe
from elmoc_allennlp.data.tokenizers.sentencepiece_bpe_tokenizer import (
    SentencePieceBpeTokenizer,
    train_sentencepiece_bpe,
)
from tests.conftest import LM_CORPUS

CORPUS = str(LM_CORPUS / "train-*.txt")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return train_sentencepiece_bpe(
        CORPUS, tmp_path_factory.mktemp("bpe") / "bpe.model", vocab_size=400
    )


def corpus_lines():
    return [
        line.strip()
        for path in sorted(LM_CORPUS.glob("*.txt"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def test_round_trips_every_corpus_line_and_unseen_text(model_path):
    tokenizer = SentencePieceBpeTokenizer(model_path=str(model_path))
    for line in corpus_lines() + ["naïve zzyzx 3.14159 über-café", "ÆØÅ 北京"]:
        pieces = tokenizer.tokenize(line)
        assert pieces and all(piece.text for piece in pieces)
        assert tokenizer.detokenize(pieces) == " ".join(line.split())


def test_frequent_words_are_single_pieces_and_rare_ones_are_split(model_path):
    tokenizer = SentencePieceBpeTokenizer(model_path=str(model_path))
    assert [t.text for t in tokenizer.tokenize("the")] == ["▁the"]
    assert len(tokenizer.tokenize("zzyzxqq")) > 1
    assert tokenizer.vocab_size == 400


def test_first_piece_of_each_word(model_path):
    tokenizer = SentencePieceBpeTokenizer(model_path=str(model_path))
    words = ["the", "zzyzxqq", "bank", "unbelievablyness"]
    pieces, first = tokenizer.tokenize_words(words)
    assert len(first) == len(words) and first[0] == 0
    assert first == sorted(first)
    for index, word in enumerate(words):
        end = first[index + 1] if index + 1 < len(words) else len(pieces)
        assert pieces[first[index]].text.startswith("▁")
        assert not any(piece.text.startswith("▁") for piece in pieces[first[index] + 1 : end])
        assert tokenizer.detokenize(pieces[first[index] : end]) == word
    assert [t.text for t in pieces] == [t.text for t in tokenizer.tokenize(" ".join(words))]


def test_trains_once_into_the_cache_from_a_config(tmp_path, monkeypatch):
    monkeypatch.setattr(bpe, "DEFAULT_BPE_CACHE", str(tmp_path / "cache"))
    params = {"type": "elmoc_sentencepiece_bpe", "train_data_path": CORPUS, "vocab_size": 350}
    tokenizer = Tokenizer.from_params(Params(dict(params)))
    assert tokenizer.model_path.startswith(str(tmp_path / "cache"))
    assert tokenizer.vocab_size == 350
    mtime = (tmp_path / "cache").stat().st_mtime_ns
    calls = []
    monkeypatch.setattr(bpe, "train_sentencepiece_bpe", lambda *a, **k: calls.append(a))
    again = Tokenizer.from_params(Params(dict(params)))
    assert again.model_path == tokenizer.model_path and not calls
    assert (tmp_path / "cache").stat().st_mtime_ns == mtime
    # Other settings, another model.
    other = SentencePieceBpeTokenizer._cache_path(CORPUS, dict(vocab_size=351, a=1))
    assert other != tokenizer.model_path


def test_pickles_by_path(model_path):
    tokenizer = SentencePieceBpeTokenizer(model_path=str(model_path))
    copy = pickle.loads(pickle.dumps(tokenizer))
    assert [t.text for t in copy.tokenize("the bank")] == [
        t.text for t in tokenizer.tokenize("the bank")
    ]


def test_needs_a_model_or_a_corpus(tmp_path):
    with pytest.raises(ConfigurationError, match="model_path"):
        SentencePieceBpeTokenizer()
    with pytest.raises(ConfigurationError, match="train_data_path"):
        SentencePieceBpeTokenizer(model_path=str(tmp_path / "missing.model"))
    with pytest.raises(ConfigurationError, match="matches no files"):
        SentencePieceBpeTokenizer(train_data_path=str(tmp_path / "nothing-*.txt"))
