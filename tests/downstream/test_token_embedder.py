"""
The ELMo-C token embedder (`elmoc_token_embedder`): options of the blocks ELMo-C replaces
(`elmo_token_embedder`, `bidirectional_lm_token_embedder`, `bcn`'s `elmo`), accepted where they
mean something for a biLM, else a precise error; the learned mix, its options and bad input.
"""

import numpy
import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Token, Vocabulary
from allennlp.modules.elmo import Elmo
from allennlp.modules.text_field_embedders import BasicTextFieldEmbedder
from allennlp.modules.token_embedders import TokenEmbedder

from elmoc_allennlp.downstream.elmoc import ElmocElmo
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from tests.downstream.conftest import SENTENCES, embed

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EMBEDDERS = "model.text_field_embedder.token_embedders.elmo."


def embedder_params(archive, **options) -> Params:
    return Params(
        {"type": "elmoc_token_embedder", "archive_file": str(archive), **options}, history=EMBEDDERS
    )


@pytest.mark.parametrize("keys", [["options_file", "weight_file"], ["weight_file"]])
def test_elmo_files_left_in_the_block_say_what_to_change(elmoc_archive, keys):
    params = embedder_params(elmoc_archive, **{key: "elmo.file" for key in keys})
    with pytest.raises(ConfigurationError) as error:
        TokenEmbedder.from_params(params)
    message = str(error.value)
    assert "ELMo-C takes archive_file; remove options_file and weight_file" in message
    for key in keys:
        assert EMBEDDERS + key in message


def test_vocab_to_cache_has_no_elmoc_meaning_but_null_is_accepted(elmoc_archive):
    with pytest.raises(ConfigurationError, match=r"elmo\.vocab_to_cache: ELMo-C has no word cache"):
        TokenEmbedder.from_params(embedder_params(elmoc_archive, vocab_to_cache=["the"]))
    embedder = TokenEmbedder.from_params(embedder_params(elmoc_archive, vocab_to_cache=None))
    assert isinstance(embedder, ElmocTokenEmbedder)


def test_bidirectional_lm_token_embedder_options_are_accepted(elmoc_archive):
    # The options of allennlp-models' constituency_parser_transformer_elmo block.
    options = {
        "dropout": 0.0,
        "bos_eos_tokens": ["<S>", "</S>"],
        "remove_bos_eos": True,
        "requires_grad": False,
    }
    embedder = TokenEmbedder.from_params(embedder_params(elmoc_archive, **options))
    kept = TokenEmbedder.from_params(
        embedder_params(elmoc_archive, **{**options, "remove_bos_eos": False})
    )
    kept.load_state_dict(embedder.state_dict())
    indexer = embedder.elmo.bilm.indexer
    subword_ids = indexed_batch(indexer, [["the", "cat", "sat"]])
    embedder.eval()
    kept.eval()
    with torch.no_grad():
        without = embedder(subword_ids)
        with_boundaries = kept(subword_ids)
    assert without.shape == (1, 3, 12)
    assert with_boundaries.shape == (1, 5, 12)  # <S> the cat sat </S>
    assert torch.allclose(with_boundaries[:, 1:4], without, atol=1e-6)


def test_other_boundary_tokens_are_refused_naming_the_biLMs(elmoc_archive):
    params = embedder_params(elmoc_archive, bos_eos_tokens=["<s>", "</s>"])
    with pytest.raises(ConfigurationError) as error:
        TokenEmbedder.from_params(params)
    assert "pretrained with ['<S>', '</S>']" in str(error.value)
    assert "bos_eos_tokens is ['<s>', '</s>']" in str(error.value)


def test_an_elmo_block_with_archive_file_builds_elmoc(elmoc_archive):
    block = {
        "archive_file": str(elmoc_archive),
        "do_layer_norm": False,
        "dropout": 0.0,
        "num_output_representations": 2,
    }
    elmo = Elmo.from_params(Params(dict(block)))
    assert isinstance(elmo, ElmocElmo)
    assert len(elmo._scalar_mixes) == 2 and elmo.get_output_dim() == 12
    with pytest.raises(ConfigurationError, match="remove options_file and weight_file"):
        Elmo.from_params(Params({**block, "options_file": "o.json", "weight_file": "w.hdf5"}))
    # Without archive_file it is allennlp's Elmo (which here fails looking for ELMo's files).
    with pytest.raises(FileNotFoundError, match="/nonexistent/o.json"):
        Elmo.from_params(
            Params(
                {
                    "options_file": "/nonexistent/o.json",
                    "weight_file": "/nonexistent/w.hdf5",
                    "num_output_representations": 1,
                }
            )
        )


def test_a_missing_biLM_archive_names_the_config_key_and_the_base(tmp_path, monkeypatch):
    from allennlp.data import TokenIndexer

    monkeypatch.chdir(tmp_path)
    missing = "runs/elmoc/model.tar.gz"
    blocks = [
        (
            TokenEmbedder,
            Params({"type": "elmoc_token_embedder", "archive_file": missing}, history=EMBEDDERS),
        ),
        (
            TokenIndexer,
            Params(
                {"type": "elmoc_bilm_inputs", "archive_file": missing},
                history="validation_dataset_reader.token_indexers.elmo.",
            ),
        ),
        (
            Elmo,
            Params(
                {"archive_file": missing, "num_output_representations": 1}, history="model.elmo."
            ),
        ),
    ]
    for base, params in blocks:
        key = params.history + "archive_file"
        with pytest.raises(ConfigurationError) as error:
            base.from_params(params)
        message = str(error.value)
        assert f"ELMo-C archive {missing} ({key}) does not exist" in message
        assert f"working directory, {tmp_path}" in message


# ---------------------------------------------------------------------- the mix, its options and bad input


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


def test_wrong_indexer_output_is_a_clear_error(elmoc_archive, tiny_fasttext_path):
    embedder = BasicTextFieldEmbedder({"elmo": ElmocTokenEmbedder(str(elmoc_archive))})
    words = FastTextSubwordIndexer(str(tiny_fasttext_path))
    tensors = words.as_padded_tensor_dict(
        words.tokens_to_indices([Token("a")], Vocabulary()), {"num_tokens": 1, "num_subwords": 4}
    )
    batched = {"elmo": {key: value.unsqueeze(0) for key, value in tensors.items()}}
    with pytest.raises(ConfigurationError, match="elmoc_bilm_inputs"):
        embedder(batched)


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
