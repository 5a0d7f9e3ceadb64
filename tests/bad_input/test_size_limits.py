"""
The library's internal sizes, limits and blocks outside the data reader and the archive reader,
each tried just below, at and just above its value (and, for blocks, twice it), against a plain
reference: the predictor's token limit, the softmax's loss chunks, the sampled softmax's draw
blocks and the 1 MiB read of an archive's fastText locations. (The others are tested beside
their code: retrieval scoring in
tests/models/bidirectional_language_model/test_retrieval_scoring.py, the fastText reader and
writer in tests/fasttext/test_vectors.py, the layer cache in
tests/downstream/test_layer_cache.py, `elmoc-embed`'s HDF5 output in
tests/commands/test_elmoc_embed.py and the merge's comparison in tests/commands/test_merge_bilm.py.)
"""

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from allennlp.common.checks import ConfigurationError

OFFSETS = pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
MULTIPLES = pytest.mark.parametrize("k", [1, 2])


# ---------------------------------------------------------------------- the predictor's token limit


@pytest.fixture(scope="module")
def predictor(elmoc_archive):
    from allennlp.common.util import import_module_and_submodules
    from allennlp.models.archival import load_archive
    from allennlp.predictors import Predictor

    import_module_and_submodules("elmoc_allennlp")
    return Predictor.from_archive(load_archive(str(elmoc_archive)), "elmoc_bilm")


@OFFSETS
def test_the_default_token_limit_refuses_one_token_past_it(predictor, monkeypatch, offset):
    from elmoc_allennlp.predictors.bilm_predictor import DEFAULT_MAX_TOKENS, MAX_TOKENS_VARIABLE

    monkeypatch.delenv(MAX_TOKENS_VARIABLE, raising=False)
    sentence = " ".join(["the"] * (DEFAULT_MAX_TOKENS + offset))
    for given in (sentence, sentence.split()):
        if offset <= 0:
            predictor.validate_json({"sentence": given})
        else:
            with pytest.raises(
                ConfigurationError,
                match=rf"'sentence' has 4,097 tokens, past {MAX_TOKENS_VARIABLE} \(4,096\)",
            ):
                predictor.validate_json({"sentence": given})


@OFFSETS
def test_a_sentence_at_the_limit_is_scored_whole(predictor, monkeypatch, offset):
    # The limit counts what the model reads: a sentence of `limit` tokens gives `limit` positions
    # (and the two boundaries), whatever whitespace separates them.
    from elmoc_allennlp.predictors.bilm_predictor import MAX_TOKENS_VARIABLE

    limit = 7
    monkeypatch.setenv(MAX_TOKENS_VARIABLE, str(limit))
    words = "the cat sat on the mat today again".split()[: limit + offset]
    sentence = "\u00a0".join(words[:2]) + "\t " + " ".join(words[2:])
    if offset > 0:
        with pytest.raises(ConfigurationError, match=f"'sentence' has {limit + 1} tokens"):
            predictor.predict(sentence)
        return
    output = predictor.predict(sentence)
    assert output["tokens"][1:-1] == words
    assert len(output["forward_cosine"]) == len(output["tokens"]) == len(words) + 2


# ---------------------------------------------------------------------- the softmax's loss chunks


class _Vocabulary:
    """A vocabulary of `size` words, without their strings."""

    def __init__(self, size):
        self.size = size

    def get_vocab_size(self, namespace):
        return self.size


@OFFSETS
@MULTIPLES
def test_softmax_losses_in_chunks_of_2_to_the_25_logits_equal_the_row_by_row_loss(k, offset):
    from elmoc_allennlp.modules.output_layers.softmax import SoftmaxOutputLayer

    torch.manual_seed(0)
    num_words = 2**20  # 2^25 // 2^20 = 32 rows a chunk
    layer = SoftmaxOutputLayer(_Vocabulary(num_words), input_dim=2)
    with torch.no_grad():
        layer.bias.normal_()
    rows = 32 * k + offset
    hidden = torch.randn(rows, 2)
    targets = torch.randint(num_words, (rows,))
    with torch.no_grad():
        losses = layer.target_loss(hidden, targets)
        expected = torch.stack(
            [
                -F.log_softmax(layer.logits(hidden[row : row + 1]), dim=-1)[0, targets[row]]
                for row in range(rows)
            ]
        )
    assert losses.shape == (rows,)
    torch.testing.assert_close(losses, expected, rtol=1e-6, atol=1e-5)


# ---------------------------------------------------------------------- the sampled softmax's draw blocks


class _Uniforms:
    """A numpy-like generator whose `random(n)` returns the next `n` of `values`, recording `n`."""

    def __init__(self, values):
        self.values, self.position, self.sizes = values, 0, []

    def random(self, size):
        self.sizes.append(size)
        out = self.values[self.position : self.position + size]
        self.position += size
        assert len(out) == size, "drew past the planned stream"
        return out


@pytest.mark.parametrize("num_samples", [4, 600], ids=["block_1024", "block_2n"])
@pytest.mark.parametrize("blocks", [1, 2], ids=["first_block", "second_block"])
@OFFSETS
def test_the_last_new_class_at_a_block_boundary_is_found_and_counted(num_samples, blocks, offset):
    # Draws come in blocks of max(2 n, 1024) values, each next block twice the last: the first
    # block ends at b, the second at 3 b. The n-th distinct class, planted one draw before, at or
    # after such an end, must be found, with `num_tries` = its position + 1 (the plain count).
    from elmoc_allennlp.modules.output_layers.sampled_softmax import LogUniformSampler

    range_max = 4 * num_samples
    sampler = LogUniformSampler(range_max, num_samples)
    block = max(2 * num_samples, 1024)
    end = block if blocks == 1 else 3 * block
    tries = end + offset
    stream = list(range(num_samples - 1)) + [0] * (tries - num_samples) + [num_samples - 1]
    stream += [range_max - 1] * (7 * block - len(stream))

    def uniform(cls):  # the middle of the uniforms that draw `cls`
        return math.log(cls + 1.5) / math.log(range_max + 1)

    generator = _Uniforms(np.array([uniform(cls) for cls in stream]))
    classes, num_tries = sampler.draw(generator)
    assert classes.tolist() == list(range(num_samples))
    assert num_tries == tries
    expected_blocks = 1 if tries <= block else 2 if tries <= 3 * block else 3
    assert generator.sizes == [block * 2**i for i in range(expected_blocks)]


# ---------------------------------------------------------------------- an archive's fastText locations


@OFFSETS
def test_fasttext_locations_are_read_up_to_1_mib(tmp_path, caplog, offset):
    from elmoc_allennlp.fasttext.location import LOCATIONS_NAME, read_locations

    record = {"/recorded/tiny.bin": {"path": "/here/tiny.bin", "fingerprint": "2:1:ab"}}
    text = json.dumps(record)
    size = (1 << 20) + offset
    # Padding before the record: the file's last byte closes it, so a cut shows.
    (tmp_path / LOCATIONS_NAME).write_text(" " * (size - len(text)) + text, encoding="utf-8")
    assert (tmp_path / LOCATIONS_NAME).stat().st_size == size
    with caplog.at_level(logging.WARNING):
        found = read_locations(tmp_path)
    if offset <= 0:
        assert found == record and not caplog.records
    else:  # larger than any real record: ignored, with a warning naming it (never half read)
        assert found == {}
        assert [r for r in caplog.records if str(tmp_path / LOCATIONS_NAME) in r.getMessage()]


@pytest.mark.parametrize("components", [2, 3, 4])
def test_a_moved_fasttext_file_is_looked_for_under_its_last_three_path_components(
    tmp_path, components
):
    from elmoc_allennlp.fasttext.location import fasttext_candidates

    parts = ["a", "b", "c", "d"][-(components - 1) :] + ["tiny.bin"]
    recorded = "/" + "/".join(parts)  # not here: the candidates are tried in order
    candidates = fasttext_candidates(recorded, [tmp_path])
    expected = [tmp_path.joinpath(*parts[-count:]) for count in range(1, min(3, len(parts)) + 1)]
    assert candidates == [Path(recorded)] + expected
    assert (tmp_path.joinpath(*parts) in candidates) == (len(parts) <= 3)
