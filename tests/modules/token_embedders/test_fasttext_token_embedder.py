import copy

import fasttext
import numpy as np
import pytest
import torch

from allennlp.common import Params
from allennlp.data import Batch, Instance, Token, Vocabulary
from allennlp.data.fields import TextField
from allennlp.modules.text_field_embedders import BasicTextFieldEmbedder
from allennlp.modules.token_embedders import TokenEmbedder
from allennlp.nn.util import get_text_field_mask

from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
from benchmarks.common import write_fasttext_bin
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.modules.token_embedders.fasttext_token_embedder import FastTextTokenEmbedder

SENTENCES = [
    ["<S>", "the", "bank", "cut", "rates", "</S>"],
    ["<S>", "café", "日本語", "zyzzyva", "", "</S>"],
    ["<S>", "😀", "</S>"],
]


def _expected(model, text):
    return model.get_word_vector("</s>" if text in ("<S>", "</S>") else text)


def _indexed(indexer, sentences):
    """A padded (batch, tokens, subwords) id tensor and mask, as a TextField would make them."""
    fields = [indexer.tokens_to_indices([Token(t) for t in s], Vocabulary()) for s in sentences]
    num_tokens = max(len(s) for s in sentences)
    num_subwords = max(indexer.get_padding_lengths(f)["num_subwords"] for f in fields)
    padded = [
        indexer.as_padded_tensor_dict(f, {"num_tokens": num_tokens, "num_subwords": num_subwords})
        for f in fields
    ]
    return (
        torch.stack([p["subword_ids"] for p in padded]),
        torch.stack([p["mask"] for p in padded]),
    )


class TestFastTextTokenEmbedder:
    def test_equals_fasttext_word_vectors_and_pads_with_zeros(self, tiny_fasttext_path):
        model = fasttext.load_model(str(tiny_fasttext_path))
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path))
        embedder = FastTextTokenEmbedder(str(tiny_fasttext_path))
        dim = model.get_dimension()
        assert embedder.get_output_dim() == dim
        ids, mask = _indexed(indexer, SENTENCES)
        output = embedder(ids, mask)
        assert output.shape == (3, 6, dim) and output.dtype == torch.float32
        assert not output.requires_grad
        for row, sentence in enumerate(SENTENCES):
            for column, text in enumerate(sentence):
                np.testing.assert_allclose(
                    output[row, column].numpy(),
                    _expected(model, text),
                    rtol=1e-5,
                    atol=1e-6,
                    err_msg=text,
                )
            assert (output[row, len(sentence) :] == 0).all()
        # Padding is zero without the mask too, and extra leading dimensions are fine.
        assert torch.equal(embedder(ids), output)
        assert torch.equal(embedder(ids.unsqueeze(0))[0], output)

    @pytest.mark.parametrize("padding", [0, 1, 2, 3])
    def test_any_file_alignment_and_tokens_without_vectors(self, tmp_path, padding):
        words = ["</s>", "the", "x" * (1 + padding)]
        for maxn, bucket in [(4, 40), (0, 0)]:
            matrix = (
                np.random.default_rng(padding).standard_normal((3 + bucket, 6)).astype(np.float32)
            )
            path = str(
                write_fasttext_bin(
                    tmp_path / f"m{maxn}.bin", words, matrix, minn=2, maxn=maxn, bucket=bucket
                )
            )
            model = fasttext.load_model(path)
            indexer = FastTextSubwordIndexer(path)
            sentences = [["<S>", "the", "dog", "", words[2], "</S>"]]
            ids, mask = _indexed(indexer, sentences)
            if maxn == 0:  # "dog" and "" have no rows: the reserved id, a zero vector
                assert ids[0, 2, 0] == ids[0, 3, 0] == indexer.no_vector_id
            output = FastTextTokenEmbedder(path)(ids, mask)
            for column, text in enumerate(sentences[0]):
                np.testing.assert_allclose(
                    output[0, column].numpy(), _expected(model, text), rtol=1e-5, atol=1e-6
                )

    def test_frozen_table_is_not_a_parameter_or_buffer(self, tiny_fasttext_path):
        embedder = FastTextTokenEmbedder(str(tiny_fasttext_path))
        assert list(embedder.parameters()) == []
        assert list(embedder.buffers()) == []
        # The state holds only the record of which vectors were used: a few hundred bytes.
        assert list(embedder.state_dict()) == ["vectors_record"]
        assert embedder.state_dict()["vectors_record"].numel() < 1000
        # Module conversions do not touch (or copy) the memory-mapped table.
        embedder.double()
        ids, _ = _indexed(FastTextSubwordIndexer(str(tiny_fasttext_path)), SENTENCES[:1])
        assert embedder(ids).dtype == torch.float32
        assert embedder.vectors is FastTextVectors.from_path(tiny_fasttext_path)
        assert copy.deepcopy(embedder).vectors is embedder.vectors

    def test_trainable_table_gets_gradients(self, tiny_fasttext_path):
        indexer = FastTextSubwordIndexer(str(tiny_fasttext_path))
        frozen = FastTextTokenEmbedder(str(tiny_fasttext_path))
        trainable = FastTextTokenEmbedder(str(tiny_fasttext_path), trainable=True)
        ((name, weight),) = list(trainable.named_parameters())
        assert name == "weight" and weight.requires_grad
        dim = frozen.vectors.dim
        assert weight.shape == (frozen.vectors.num_rows, dim)
        assert list(trainable.state_dict()) == ["weight", "vectors_record"]
        ids, mask = _indexed(indexer, SENTENCES)
        output = trainable(ids, mask)
        torch.testing.assert_close(output, frozen(ids, mask))
        output.sum().backward()
        # d(sum)/d(row r) = sum over tokens of (occurrences of r in it) / (its number of rows).
        expected = torch.zeros(frozen.vectors.num_rows)
        for token_ids in ids.view(-1, ids.size(-1)):
            rows = token_ids[token_ids > 0] - 1
            for row in rows.tolist():
                expected[row] += 1.0 / len(rows)
        torch.testing.assert_close(weight.grad, expected.unsqueeze(1).expand(-1, dim))
        assert weight.grad[expected == 0].abs().sum() == 0

    def test_out_of_range_ids_are_reported(self, tiny_fasttext_path):
        embedder = FastTextTokenEmbedder(str(tiny_fasttext_path))
        too_big = embedder.vectors.num_rows + 2
        with pytest.raises(ValueError, match=f"subword id {too_big} is out of range"):
            embedder(torch.tensor([[[1, too_big]]]))
        with pytest.raises(ValueError, match="subword id -1 is out of range"):
            embedder(torch.tensor([[[-1]]]))

    def test_from_params(self, tiny_fasttext_path):
        embedder = TokenEmbedder.from_params(
            Params({"type": "elmoc_fasttext", "vectors_path": str(tiny_fasttext_path)})
        )
        assert isinstance(embedder, FastTextTokenEmbedder)
        assert embedder.vectors is FastTextVectors.from_path(tiny_fasttext_path)
        trainable = TokenEmbedder.from_params(
            Params(
                {
                    "type": "elmoc_fasttext",
                    "vectors_path": str(tiny_fasttext_path),
                    "trainable": True,
                }
            )
        )
        assert len(list(trainable.parameters())) == 1

    def test_text_field_end_to_end(self, tiny_fasttext_path):
        model = fasttext.load_model(str(tiny_fasttext_path))
        indexers = {"fasttext": FastTextSubwordIndexer(str(tiny_fasttext_path))}
        instances = [
            Instance({"tokens": TextField([Token(t) for t in sentence], indexers)})
            for sentence in SENTENCES
        ]
        batch = Batch(instances)
        batch.index_instances(Vocabulary())
        tensors = batch.as_tensor_dict()["tokens"]
        assert set(tensors["fasttext"]) == {"subword_ids", "mask"}
        expected_mask = torch.tensor([[True] * 6, [True] * 6, [True] * 3 + [False] * 3])
        assert torch.equal(get_text_field_mask(tensors), expected_mask)

        text_field_embedder = BasicTextFieldEmbedder(
            {"fasttext": FastTextTokenEmbedder(str(tiny_fasttext_path))}
        )
        embedded = text_field_embedder(tensors)
        assert embedded.shape == (3, 6, model.get_dimension())
        for row, sentence in enumerate(SENTENCES):
            for column, text in enumerate(sentence):
                np.testing.assert_allclose(
                    embedded[row, column].detach().numpy(),
                    _expected(model, text),
                    rtol=1e-5,
                    atol=1e-6,
                )
        assert (embedded[2, 3:] == 0).all()
