"""The ELMo-C token embedder, indexer and Elmo-like module: values, shapes, options, bad input."""
import pickle

import numpy
import pytest
import torch

from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch, Instance, Token, Vocabulary
from allennlp.data.fields import TextField
from allennlp.models.archival import load_archive
from allennlp.modules.text_field_embedders import BasicTextFieldEmbedder
from allennlp.nn.util import get_text_field_mask

from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from elmoc_allennlp.downstream.input_kinds import add_boundaries
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.downstream.archive import BilmArchive
from elmoc_allennlp.downstream.elmoc import ElmocBiLm, ElmocElmo
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from tests.conftest import rewrite_archive

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["a", "dog"],
    [],
    ["unseenword", "zzqx", "the"],
]


def reference_layers(archive_path, sentences):
    """
    The biLM's layers computed the pretraining way: the archive's own reader wraps each sentence
    in <S> ... </S> tokens, the model's `contextual_layers` runs, and the boundaries are cut off.
    Returns a list of arrays of shape (num_layers, len(sentence), dim).
    """
    archive = load_archive(str(archive_path))
    model, reader = archive.model, archive.dataset_reader
    model.eval()
    instances = []
    for sentence in sentences:
        instance = reader.text_to_instance(sentence)
        reader.apply_token_indexers(instance)
        instances.append(instance)
    batch = Batch(instances)
    batch.index_instances(model.vocab)
    with torch.no_grad():
        layers, mask = model.contextual_layers(batch.as_tensor_dict()["tokens"])
    return [
        layers[:, index, 1 : len(sentence) + 1].numpy() for index, sentence in enumerate(sentences)
    ]


@pytest.fixture(scope="module")
def bilm(elmoc_archive):
    return ElmocBiLm(str(elmoc_archive))


@pytest.fixture(scope="module")
def indexer(elmoc_archive):
    return BilmArchiveIndexer.from_archive(str(elmoc_archive))


@pytest.fixture(scope="module")
def expected_layers(elmoc_archive):
    return reference_layers(elmoc_archive, SENTENCES)


def embed(module, indexer, sentences):
    return module(indexed_batch(indexer, sentences))


# ---------------------------------------------------------------------- archive and biLM


def test_archive_reads_the_config_without_the_weights(elmoc_archive, tiny_fasttext_path):
    archive = BilmArchive(str(elmoc_archive))
    assert archive.input_key == "fasttext"
    assert archive.num_layers == 3 and archive.output_dim == 12
    assert (archive.start_token, archive.end_token) == ("<S>", "</S>")
    assert archive.input_vectors_path == str(tiny_fasttext_path)


def test_bilm_layers_equal_the_pretrained_model_with_boundary_tokens(
    bilm, indexer, expected_layers
):
    output = embed(bilm, indexer, SENTENCES)
    assert bilm.num_layers == 3 and bilm.get_output_dim() == 12
    assert len(output["activations"]) == 3
    mask = output["mask"]
    # Boundaries added: <S> + tokens + </S> per sentence.
    assert mask.sum(-1).tolist() == [len(sentence) + 2 for sentence in SENTENCES]
    for index, sentence in enumerate(SENTENCES):
        got = numpy.stack(
            [
                layer[index, 1 : len(sentence) + 1].detach().numpy()
                for layer in output["activations"]
            ]
        )
        numpy.testing.assert_allclose(got, expected_layers[index], atol=1e-5)
    # Layer 0 is [x_forward; x_backward] (one input projection per direction); layers are zero at
    # padding.
    layer_0 = output["activations"][0]
    assert not torch.allclose(layer_0[..., :6], layer_0[..., 6:])
    for layer in output["activations"]:
        assert torch.all(layer[~mask] == 0)


def test_boundary_ids_are_inserted_after_each_sentence(bilm, indexer):
    ids = indexed_batch(indexer, [["a", "b", "c"], ["d"]])
    with_boundaries, mask = add_boundaries(ids, bilm.boundary_ids)
    # Two boundary vectors, as pretrained (the authors' `<s>` and `</s>`).
    start, end = indexer.token_ids("<S>"), indexer.token_ids("</S>")
    assert start != end
    width = with_boundaries.size(-1)
    for row, length in ((0, 3), (1, 1)):
        assert with_boundaries[row, 0].tolist() == start + [0] * (width - len(start))
        assert with_boundaries[row, length + 1].tolist() == end + [0] * (width - len(end))
        assert torch.equal(with_boundaries[row, 1 : length + 1, : ids.size(-1)], ids[row, :length])
        assert mask[row].tolist() == [True] * (length + 2) + [False] * (3 - length)
    assert torch.all(with_boundaries[1, 3:] == 0)


def test_biLM_stays_in_eval_mode_so_features_are_deterministic(elmoc_archive, indexer):
    embedder = ElmocTokenEmbedder(str(elmoc_archive), dropout=0.0)
    embedder.train()
    assert embedder.training and not embedder.elmo.bilm.bilm.training
    ids = indexed_batch(indexer, SENTENCES)
    # The tiny biLM was pretrained with recurrent dropout 0.1: in train mode it would differ.
    assert torch.equal(embedder(ids), embedder(ids))


# ---------------------------------------------------------------------- the mix


def test_output_is_gamma_times_softmax_weighted_sum_of_layers(
    elmoc_archive, indexer, expected_layers
):
    embedder = ElmocTokenEmbedder(str(elmoc_archive), dropout=0.0)
    mix = embedder.elmo.scalar_mix_0
    weights = [0.3, -1.0, 2.0]
    with torch.no_grad():
        for parameter, value in zip(mix.scalar_parameters, weights):
            parameter.fill_(value)
        mix.gamma.fill_(1.7)
    output = embed(embedder, indexer, SENTENCES)
    assert output.shape == (len(SENTENCES), 6, 12) and embedder.get_output_dim() == 12
    normalized = torch.softmax(torch.tensor(weights), 0).numpy()
    for index, sentence in enumerate(SENTENCES):
        expected = 1.7 * numpy.einsum("l,ltd->td", normalized, expected_layers[index])
        numpy.testing.assert_allclose(
            output[index, : len(sentence)].detach().numpy(), expected, atol=1e-5
        )
        assert torch.all(output[index, len(sentence) :] == 0)


def test_fixed_scalar_mix_parameters_select_a_layer_and_are_not_trained(
    elmoc_archive, indexer, expected_layers
):
    embedder = ElmocTokenEmbedder(
        str(elmoc_archive), dropout=0.0, scalar_mix_parameters=[-9e10, -9e10, 1.0]
    )
    assert not any(parameter.requires_grad for parameter in embedder.parameters())
    output = embed(embedder, indexer, SENTENCES[:1])
    numpy.testing.assert_allclose(output[0].numpy(), expected_layers[0][-1], atol=1e-5)


def test_do_layer_norm_normalizes_each_layer_over_the_tokens_and_boundaries(
    elmoc_archive, bilm, indexer
):
    embedder = ElmocTokenEmbedder(str(elmoc_archive), dropout=0.0, do_layer_norm=True)
    output = embed(embedder, indexer, SENTENCES).detach()
    activations = embed(bilm, indexer, SENTENCES)
    mask = activations["mask"].unsqueeze(-1).float()
    count = mask.sum() * 12
    expected = 0
    for layer in activations["activations"]:
        mean = (layer * mask).sum() / count
        variance = (((layer - mean) * mask) ** 2).sum() / count
        expected = expected + (layer - mean) / torch.sqrt(variance + 1e-13) / 3
    for index, sentence in enumerate(SENTENCES):
        assert torch.allclose(
            output[index, : len(sentence)], expected[index, 1 : len(sentence) + 1], atol=1e-4
        )


def test_projection_dim_and_dropout(elmoc_archive, indexer):
    embedder = ElmocTokenEmbedder(str(elmoc_archive), dropout=0.5, projection_dim=5)
    assert embedder.get_output_dim() == 5
    ids = indexed_batch(indexer, SENTENCES)
    embedder.train()
    trained = embedder(ids)
    assert trained.shape == (len(SENTENCES), 6, 5)
    trained.sum().backward()
    assert embedder._projection.weight.grad is not None
    embedder.eval()
    assert torch.equal(embedder(ids), embedder(ids))
    assert not torch.equal(embedder(ids), trained)


def test_biLM_is_frozen_by_default_and_fine_tuned_with_requires_grad(elmoc_archive, indexer):
    frozen = ElmocTokenEmbedder(str(elmoc_archive))
    trainable = {name for name, p in frozen.named_parameters() if p.requires_grad}
    assert trainable == {
        "_elmo.scalar_mix_0.gamma",
        "_elmo.scalar_mix_0.scalar_parameters.0",
        "_elmo.scalar_mix_0.scalar_parameters.1",
        "_elmo.scalar_mix_0.scalar_parameters.2",
    }
    tuned = ElmocTokenEmbedder(str(elmoc_archive), requires_grad=True, dropout=0.0)
    embed(tuned, indexer, SENTENCES).sum().backward()
    encoder = tuned.elmo.bilm.bilm._contextualizer
    assert all(p.requires_grad and p.grad is not None for p in encoder.parameters())


def test_scalar_mix_l2_penalty_adds_its_gradient_once_per_backward(bilm, indexer):
    ids = indexed_batch(indexer, SENTENCES)
    gradients = []
    for penalty in (0.0, 0.25):
        elmo = ElmocElmo(
            None, 1, dropout=0.0, scalar_mix_l2_penalty=penalty, module=bilm
        )
        with torch.no_grad():
            for parameter, value in zip(elmo.scalar_mix_0.scalar_parameters, [0.5, -1.0, 2.0]):
                parameter.fill_(value)
        # Used twice in one forward pass (like ESIM's premise and hypothesis).
        loss = sum(elmo(ids)["elmo_representations"][0].sum() for _ in range(2))
        loss.backward()
        gradients.append(torch.cat([p.grad for p in elmo.scalar_mix_0.scalar_parameters]))
    expected = gradients[0] + 2 * 0.25 * torch.tensor([0.5, -1.0, 2.0])
    assert torch.allclose(gradients[1], expected, atol=1e-5)


def test_elmoc_elmo_has_several_output_representations(bilm, indexer):
    elmo = ElmocElmo(None, 2, dropout=0.0, module=bilm)
    with torch.no_grad():
        elmo.scalar_mix_1.scalar_parameters[2].fill_(5.0)
    output = elmo(indexed_batch(indexer, SENTENCES))
    first, second = output["elmo_representations"]
    assert first.shape == second.shape == (len(SENTENCES), 6, 12)
    assert not torch.allclose(first, second)
    assert output["mask"].sum(-1).tolist() == [len(sentence) for sentence in SENTENCES]


# ---------------------------------------------------------------------- batches and lengths


def test_a_sentence_gets_the_same_vectors_alone_or_in_a_padded_batch(elmoc_archive, indexer):
    embedder = ElmocTokenEmbedder(str(elmoc_archive), dropout=0.0)
    batch = embed(embedder, indexer, SENTENCES)
    for index, sentence in enumerate(SENTENCES):
        if not sentence:
            assert torch.all(batch[index] == 0)
            continue
        alone = embed(embedder, indexer, [sentence])
        assert torch.allclose(batch[index, : len(sentence)], alone[0], atol=1e-5)


def test_sentences_longer_than_in_pretraining_and_empty_batches(elmoc_archive, indexer):
    # The tiny biLM saw at most 200 tokens per sentence (the reader splits longer ones). Both
    # sides batch the sentence alone: the barely trained tiny biLM is chaotic on it, so float
    # rounding differences of other batchings would be amplified.
    long_sentence = (["the", "cat", "sat", "on", "a", "mat"] * 50)[:250]
    expected = reference_layers(elmoc_archive, [long_sentence])[0]
    embedder = ElmocTokenEmbedder(
        str(elmoc_archive), dropout=0.0, scalar_mix_parameters=[-9e10, -9e10, 1.0]
    )
    output = embed(embedder, indexer, [long_sentence])
    assert output.shape == (1, 250, 12)
    numpy.testing.assert_allclose(output[0].numpy(), expected[-1], atol=1e-4)
    empty = embed(embedder, indexer, [[], []])
    assert empty.shape == (2, 0, 12)


# ---------------------------------------------------------------------- indexer


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

    def lowercase_in_pretraining(config):
        config["dataset_reader"]["token_indexers"]["fasttext"]["lowercase_tokens"] = True

    lowered_archive = rewrite_archive(
        elmoc_archive, tmp_path / "lower.tar.gz", lowercase_in_pretraining
    )
    assert BilmArchive(lowered_archive).lowercase_tokens
    assert not BilmArchive(elmoc_archive).lowercase_tokens
    cased, lower = [Token("The"), Token("CAT")], [Token("the"), Token("cat")]
    inherited = BilmArchiveIndexer.from_archive(str(lowered_archive))
    assert inherited.tokens_to_indices(cased, Vocabulary()) == indexer.tokens_to_indices(
        lower, Vocabulary()
    )
    assert indexer.tokens_to_indices(cased, Vocabulary()) != indexer.tokens_to_indices(
        lower, Vocabulary()
    )
    overridden = BilmArchiveIndexer.from_archive(str(lowered_archive), lowercase_tokens=False)
    assert overridden.tokens_to_indices(cased, Vocabulary()) == indexer.tokens_to_indices(
        cased, Vocabulary()
    )
    # The Python API uses the archive's own indexer, so it lowercases too.
    api = ElmocEmbedder(str(lowered_archive))
    numpy.testing.assert_allclose(
        api.embed_sentence(["The", "CAT"]), api.embed_sentence(["the", "cat"]), atol=1e-6
    )
    assert not numpy.allclose(
        ElmocEmbedder(str(elmoc_archive)).embed_sentence(["The", "CAT"]),
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


# ---------------------------------------------------------------------- bad input


def test_wrong_indexer_output_is_a_clear_error(elmoc_archive, tiny_fasttext_path):
    embedder = BasicTextFieldEmbedder({"elmo": ElmocTokenEmbedder(str(elmoc_archive))})
    words = FastTextSubwordIndexer(str(tiny_fasttext_path))
    tensors = words.as_padded_tensor_dict(
        words.tokens_to_indices([Token("a")], Vocabulary()), {"num_tokens": 1, "num_subwords": 4}
    )
    batched = {"elmo": {key: value.unsqueeze(0) for key, value in tensors.items()}}
    with pytest.raises(ConfigurationError, match="elmoc_bilm_inputs"):
        embedder(batched)


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
    with pytest.raises(ConfigurationError, match=r"dataset_reader\.token_indexers\.elmo_characters"):
        BilmArchiveIndexer.from_archive(str(cnn))

    def unsupported_input(config):
        config["model"]["text_field_embedder"]["token_embedders"]["fasttext"] = {"type": "pass_through", "hidden_dim": 16}

    other_input = rewrite_archive(elmoc_archive, tmp_path / "other.tar.gz", unsupported_input)
    with pytest.raises(ConfigurationError, match=r"model\.text_field_embedder\.token_embedders\.fasttext"):
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
    assert torch.equal(
        embed(moved, moved_indexer, SENTENCES), embed(original, indexer, SENTENCES)
    )


def test_vectors_of_the_wrong_dimension(elmoc_archive, tmp_path):
    words = ["</s>", "the", "cat"]
    wrong = write_fasttext_bin(
        tmp_path / "eight.bin", words, numpy.ones((3 + 10, 8)), minn=2, maxn=3, bucket=10
    )
    with pytest.raises(ConfigurationError, match=r"dimension 8.*model\.contextualizer\.input_dim"):
        ElmocTokenEmbedder(str(elmoc_archive), vectors_path=str(wrong))


def test_bad_mixing_options(elmoc_archive, bilm):
    with pytest.raises(ConfigurationError, match="scalar_mix_parameters has 2 weights.*3 layers"):
        ElmocTokenEmbedder(str(elmoc_archive), scalar_mix_parameters=[0.0, 1.0])
    with pytest.raises(ConfigurationError, match="scalar_mix_l2_penalty"):
        ElmocElmo(
            None, 1, scalar_mix_parameters=[0.0, 0.0, 1.0], scalar_mix_l2_penalty=0.1, module=bilm
        )
    with pytest.raises(ConfigurationError, match="dropout"):
        ElmocElmo(None, 1, dropout=1.5, module=bilm)
    with pytest.raises(ConfigurationError, match="projection_dim"):
        ElmocTokenEmbedder(str(elmoc_archive), projection_dim=0)
