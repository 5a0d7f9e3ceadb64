"""The biLM of an archive as a module (`ElmocBiLm`) and the Elmo-like module (`ElmocElmo`): layers
equal to pretraining's, boundaries, eval mode, the mixes, batches and lengths."""

import numpy
import pytest
import torch

from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.downstream.elmoc import ElmocElmo
from elmoc_allennlp.downstream.input_kinds import add_boundaries
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from tests.downstream.conftest import SENTENCES, embed, reference_layers

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


def test_scalar_mix_l2_penalty_adds_its_gradient_once_per_backward(bilm, indexer):
    ids = indexed_batch(indexer, SENTENCES)
    gradients = []
    for penalty in (0.0, 0.25):
        elmo = ElmocElmo(None, 1, dropout=0.0, scalar_mix_l2_penalty=penalty, module=bilm)
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
