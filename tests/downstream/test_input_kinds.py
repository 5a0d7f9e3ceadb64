"""
Every biLM the project pretrains works downstream: fastText input (ELMo-C), character-CNN input
(ELMo) and BPE-piece input (ELMo-Sub), through the `elmoc_bilm_inputs` indexer, the
`elmoc_token_embedder`, `ElmocBiLm`/`ElmocElmo`, `ElmocEmbedder` and `elmoc-embed`, each on a
tiny trained archive. The downstream layers equal the biLM run the way pretraining ran it.
"""

import json
from pathlib import Path

import h5py
import numpy
import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Token, TokenIndexer, Vocabulary
from allennlp.modules.token_embedders import TokenEmbedder

import elmoc_allennlp  # noqa: F401
import elmoc_allennlp.data.tokenizers.sentencepiece_bpe_tokenizer as bpe
from elmoc_allennlp.downstream.input_kinds import CHARACTERS_INPUT, FASTTEXT_INPUT, PIECES_INPUT
from elmoc_allennlp.downstream.archive import BilmArchive
from elmoc_allennlp.finetune.archive_fasttext import archive_with_its_fasttext
from elmoc_allennlp.commands.elmoc_embed import embed_file
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.downstream.input_kinds import (
    ElmocCharacterIndexer,
    ElmocFastTextIndexer,
    ElmocPieceIndexer,
    lay_out_pieces,
    pieces_to_words,
)
from elmoc_allennlp.downstream.elmoc import ElmocBiLm, ElmocElmo
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
from tests.conftest import rewrite_archive
from tests.training_configs.pretrain.test_baselines import tiny_config

SENTENCES = [["the", "bank", "raised", "rates"], ["a", "boat"], []]
OUTPUT_DIM = 12  # 2 x projection_dim 6


@pytest.fixture(scope="module")
def bpe_cache(tmp_path_factory):
    """ELMo-Sub's BPE model (trained on first use) goes to a test directory, not the user's cache."""
    previous = bpe.DEFAULT_BPE_CACHE
    bpe.DEFAULT_BPE_CACHE = str(tmp_path_factory.mktemp("bpe_cache"))
    yield
    bpe.DEFAULT_BPE_CACHE = previous


def _train(variant: str, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp(f"tiny_{variant}")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_model(Params.from_file(str(tiny_config(variant, directory))), str(directory / "run"))
    finally:
        torch.set_num_threads(previous)
    return directory / "run" / "model.tar.gz"


@pytest.fixture(scope="module")
def archives(elmoc_archive, tiny_fasttext_path, bpe_cache, tmp_path_factory):
    return {
        FASTTEXT_INPUT: elmoc_archive,
        CHARACTERS_INPUT: _train("elmo", tmp_path_factory),
        PIECES_INPUT: _train("elmo_sub", tmp_path_factory),
    }


KINDS = [FASTTEXT_INPUT, CHARACTERS_INPUT, PIECES_INPUT]


@pytest.mark.parametrize("kind", KINDS)
def test_archive_input_kind_and_indexer(archives, kind):
    archive = BilmArchive(archives[kind])
    assert archive.input_kind.name == kind
    assert archive.output_dim == OUTPUT_DIM
    assert (archive.input_vectors_path is not None) == (kind == FASTTEXT_INPUT)
    indexer = TokenIndexer.from_params(
        Params({"type": "elmoc_bilm_inputs", "archive_file": str(archives[kind])})
    )
    expected = {
        FASTTEXT_INPUT: ElmocFastTextIndexer,
        CHARACTERS_INPUT: ElmocCharacterIndexer,
        PIECES_INPUT: ElmocPieceIndexer,
    }[kind]
    assert type(indexer) is expected
    indexed = indexer.tokens_to_indices([Token("bank"), Token("unbelievably")], Vocabulary())
    rows = indexed["elmo_tokens"]
    assert len(rows) == 2 and all(len(row) >= 1 and min(row) > 0 for row in rows)


@pytest.mark.parametrize("kind", KINDS)
def test_a_million_character_token_gives_bounded_ids(archives, kind):
    """Every kind cuts a token at 50 characters (ELMo's cap) before it becomes ids."""
    import tracemalloc

    indexer = TokenIndexer.from_params(
        Params({"type": "elmoc_bilm_inputs", "archive_file": str(archives[kind])})
    )
    long_token = "x" * 1_000_000
    tracemalloc.start()
    ids = indexer.tokens_to_indices([Token(long_token)], Vocabulary())["elmo_tokens"][0]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    expected = indexer.tokens_to_indices([Token(long_token[:50])], Vocabulary())["elmo_tokens"][0]
    assert ids == expected
    assert len(ids) <= 50 * 6  # at most a few ids per character (fastText n-grams of 3-6)
    assert peak < 8 * len(long_token)  # a few copies of the token, not its n-grams


@pytest.mark.parametrize("kind", KINDS)
def test_token_embedder_from_config(archives, kind, one_torch_thread):
    params = {"archive_file": str(archives[kind])}
    indexer = TokenIndexer.from_params(Params({"type": "elmoc_bilm_inputs", **params}))
    embedder = TokenEmbedder.from_params(
        Params({"type": "elmoc_token_embedder", "bilm_dim": OUTPUT_DIM, "dropout": 0.0, **params})
    )
    ids = indexed_batch(indexer, SENTENCES)
    vectors = embedder(ids)
    assert vectors.shape == (3, 4, OUTPUT_DIM)
    assert torch.all(vectors[1, 2:] == 0) and torch.all(vectors[2] == 0)
    assert vectors[0].abs().sum() > 0
    # A sentence's vectors do not depend on its batch.
    alone = embedder(indexed_batch(indexer, SENTENCES[1:2]))
    torch.testing.assert_close(alone[0], vectors[1, :2], rtol=1e-5, atol=1e-5)
    # Gradients reach the mixing weights (the biLM is frozen).
    vectors.sum().backward()
    mix = embedder.elmo._scalar_mixes[0]
    assert all(p.grad is not None for p in mix.scalar_parameters)
    assert all(p.grad is None for p in embedder.elmo.bilm.bilm.parameters())


def _pretraining_layers(bilm: ElmocBiLm, pieces_or_tokens):
    """The biLM's layers on one sentence indexed the way pretraining indexed it (with boundaries)."""
    indexer = bilm.indexer
    archive = bilm.archive
    tokens = (
        [Token(archive.start_token)]
        + [Token(t) for t in pieces_or_tokens]
        + [Token(archive.end_token)]
    )
    indexed = indexer.tokens_to_indices(tokens, bilm.bilm.vocab)
    padding = indexer.get_padding_lengths(indexed)
    tensors = {
        k: v.unsqueeze(0) for k, v in indexer.as_padded_tensor_dict(indexed, padding).items()
    }
    with torch.no_grad():
        layers, _ = bilm.bilm.contextual_layers({archive.input_key: tensors})
    return layers[:, 0]


@pytest.mark.parametrize("kind", [FASTTEXT_INPUT, CHARACTERS_INPUT])
def test_bilm_layers_equal_pretraining_run(archives, kind, one_torch_thread):
    bilm = ElmocBiLm(str(archives[kind]))
    indexer = TokenIndexer.from_params(
        Params({"type": "elmoc_bilm_inputs", "archive_file": str(archives[kind])})
    )
    with torch.no_grad():
        output = bilm(indexed_batch(indexer, SENTENCES[:1]))
    downstream = torch.stack(output["activations"])[:, 0]
    expected = _pretraining_layers(bilm, SENTENCES[0])
    torch.testing.assert_close(downstream, expected, rtol=1e-5, atol=1e-5)


def test_piece_bilm_words_take_last_and_first_piece_states(archives, one_torch_thread):
    bilm = ElmocBiLm(str(archives[PIECES_INPUT]))
    indexer = TokenIndexer.from_params(
        Params({"type": "elmoc_bilm_inputs", "archive_file": str(archives[PIECES_INPUT])})
    )
    words = ["unbelievably", "the", "bankers"]
    piece_rows = indexer.tokens_to_indices([Token(w) for w in words], None)["elmo_tokens"]
    assert max(len(row) for row in piece_rows) > 1, "the test needs a word of several pieces"
    # The pretraining tokenizer's pieces of the sentence, run the way pretraining ran them.
    tokenizer = indexer._piece_tokenizer
    pieces = [piece.text for piece in tokenizer.tokenize(" ".join(words))]
    expected_layers = _pretraining_layers(bilm, pieces)  # (layers, pieces + 2, dim)
    with torch.no_grad():
        output = bilm(indexed_batch(indexer, [words]))
    layers = torch.stack(output["activations"])[:, 0]
    assert output["mask"][0].tolist() == [True] * (len(words) + 2)
    half = OUTPUT_DIM // 2
    position = 1
    for word_index, row in enumerate(piece_rows):
        first, last = position, position + len(row) - 1
        torch.testing.assert_close(
            layers[:, word_index + 1, :half], expected_layers[:, last, :half], rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(
            layers[:, word_index + 1, half:], expected_layers[:, first, half:], rtol=1e-5, atol=1e-5
        )
        position = last + 1
    torch.testing.assert_close(layers[:, 0], expected_layers[:, 0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layers[:, -1], expected_layers[:, -1], rtol=1e-5, atol=1e-5)


def test_lay_out_pieces_positions():
    piece_ids = torch.tensor(
        [[[5, 6, 0], [7, 0, 0], [0, 0, 0]], [[8, 0, 0], [9, 10, 11], [12, 0, 0]]]
    )
    sequence, first, last, mask = lay_out_pieces(piece_ids, start_id=2, end_id=3)
    assert sequence.tolist() == [[2, 5, 6, 7, 3, 0, 0], [2, 8, 9, 10, 11, 12, 3]]
    assert first.tolist() == [[1, 3, 0], [1, 2, 5]]
    assert last.tolist() == [[2, 3, 0], [1, 4, 5]]
    layers = torch.arange(7.0).view(1, 1, 7, 1).expand(1, 2, 7, 2).clone()
    words, word_mask = pieces_to_words(layers, first, last, mask)
    # forward half = last piece's position, backward half = first piece's, </S> after the words.
    assert words[0, 0].tolist() == [[0, 0], [2, 1], [3, 3], [4, 4], [0, 0]]
    assert words[0, 1].tolist() == [[0, 0], [1, 1], [4, 2], [5, 5], [6, 6]]
    assert word_mask.tolist() == [[True, True, True, True, False], [True] * 5]


@pytest.mark.parametrize("kind", KINDS)
def test_embedder_api_and_elmoc_embed(archives, kind, tmp_path, one_torch_thread):
    embedder = ElmocEmbedder(str(archives[kind]))
    vectors = embedder.embed_batch(SENTENCES, output="all")
    assert [v.shape for v in vectors] == [
        (3, 4, OUTPUT_DIM),
        (3, 2, OUTPUT_DIM),
        (3, 0, OUTPUT_DIM),
    ]
    elmo = ElmocElmo(str(archives[kind]), num_output_representations=2, dropout=0.0)
    assert len(elmo(embedder.batch_to_ids(SENTENCES))["elmo_representations"]) == 2
    text = tmp_path / "input.txt"
    text.write_text("the bank raised rates\na boat\n")
    output = embed_file(
        str(archives[kind]), str(text), str(tmp_path / "out.hdf5"), output="top", embedder=embedder
    )
    with h5py.File(output, "r") as hdf5:
        assert hdf5["1"].shape == (2, OUTPUT_DIM)
        assert json.loads(hdf5["sentence_to_index"][()])["a boat"] == "1"


def test_character_indexer_lowercases_when_asked(archives):
    upper = TokenIndexer.from_params(
        Params(
            {
                "type": "elmoc_bilm_inputs",
                "archive_file": str(archives[CHARACTERS_INPUT]),
                "lowercase_tokens": True,
            }
        )
    )
    plain = TokenIndexer.from_params(
        Params({"type": "elmoc_bilm_inputs", "archive_file": str(archives[CHARACTERS_INPUT])})
    )
    assert upper.tokens_to_indices([Token("Bank")], None) == plain.tokens_to_indices(
        [Token("bank")], None
    )
    assert plain.tokens_to_indices([Token("Bank")], None) != plain.tokens_to_indices(
        [Token("bank")], None
    )


def test_errors_name_the_key(archives, tiny_fasttext_path, tmp_path):
    characters = str(archives[CHARACTERS_INPUT])
    with pytest.raises(ConfigurationError, match="vectors_path"):
        BilmArchive(characters, str(tiny_fasttext_path))
    with pytest.raises(ConfigurationError, match="fastText-input biLM"):
        archive_with_its_fasttext(characters)

    def unsupported_embedder(config):
        config["model"]["text_field_embedder"]["token_embedders"]["elmo_characters"][
            "type"
        ] = "pass_through"
        config["model"]["text_field_embedder"]["token_embedders"]["elmo_characters"][
            "hidden_dim"
        ] = 8

    broken = rewrite_archive(
        archives[CHARACTERS_INPUT], tmp_path / "a" / "model.tar.gz", unsupported_embedder
    )
    with pytest.raises(ConfigurationError, match=r"token_embedders\.elmo_characters"):
        BilmArchive(broken)

    def wrong_indexer(config):
        config["dataset_reader"]["token_indexers"]["elmo_characters"] = {"type": "single_id"}

    broken = rewrite_archive(
        archives[CHARACTERS_INPUT], tmp_path / "b" / "model.tar.gz", wrong_indexer
    )
    with pytest.raises(
        ConfigurationError, match=r"dataset_reader\.token_indexers\.elmo_characters"
    ):
        BilmArchive(broken)


@pytest.mark.parametrize("kind", KINDS)
def test_ner_tagger_config_trains_with_every_kind(
    archives, kind, tiny_fasttext_path, tmp_path, monkeypatch, one_torch_thread
):
    from allennlp.commands.train import train_model_from_file
    from allennlp.common.util import import_module_and_submodules

    import_module_and_submodules("allennlp_models.tagging")
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "downstream" / "conll2003.txt"
    environment = {
        "ELMOC_ARCHIVE": str(archives[kind]),
        "ELMOC_DIM": str(OUTPUT_DIM),
        "ELMOC_FASTTEXT": str(tiny_fasttext_path),
        "ELMOC_FASTTEXT_DIM": "16",
        "NER_TRAIN_DATA_PATH": str(fixtures),
        "NER_VALIDATION_DATA_PATH": str(fixtures),
        "NER_TEST_DATA_PATH": str(fixtures),
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    config = (
        Path(__file__).resolve().parents[2]
        / "training_configs"
        / "downstream"
        / "ner_crf_tagger.jsonnet"
    )
    train_model_from_file(
        str(config), str(tmp_path / "run"), overrides=json.dumps({"trainer.num_epochs": 1})
    )
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert 0.0 <= metrics["test_f1-measure-overall"] <= 1.0


def test_elmoc_embed_lowercases_a_character_biLM_when_asked(archives, tmp_path, one_torch_thread):
    text = tmp_path / "input.txt"
    text.write_text("The Bank\nthe bank\n")
    output = embed_file(
        str(archives[CHARACTERS_INPUT]),
        str(text),
        str(tmp_path / "lower.hdf5"),
        output="all",
        lowercase_tokens=True,
    )
    cased = embed_file(
        str(archives[CHARACTERS_INPUT]), str(text), str(tmp_path / "cased.hdf5"), output="all"
    )
    with h5py.File(output, "r") as lower, h5py.File(cased, "r") as plain:
        numpy.testing.assert_allclose(lower["0"][()], lower["1"][()], rtol=1e-5, atol=1e-6)
        assert numpy.abs(plain["0"][()] - plain["1"][()]).max() > 1e-4
