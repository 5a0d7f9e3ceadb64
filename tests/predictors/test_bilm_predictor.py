"""The `elmoc_bilm` predictor on the tiny trained biLM: outputs, their shapes and their values."""

import json
import sys

import numpy
import pytest

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive
from allennlp.predictors import Predictor

from elmoc_allennlp.predictors.bilm_predictor import BidirectionalLanguageModelPredictor

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = ["the cat sat on the mat", "a dog", "unseenword zzqx the"]


@pytest.fixture(scope="module")
def predictor(elmoc_archive) -> BidirectionalLanguageModelPredictor:
    return Predictor.from_archive(load_archive(elmoc_archive), "elmoc_bilm")


def test_the_archive_names_this_predictor_as_its_default(elmoc_archive):
    assert isinstance(Predictor.from_path(elmoc_archive), BidirectionalLanguageModelPredictor)


def test_shapes_and_boundaries(predictor):
    output = predictor.predict("the cat sat")
    assert output["tokens"] == ["<S>", "the", "cat", "sat", "</S>"]
    assert set(output) == {
        "tokens",
        "loss",
        "forward_loss",
        "backward_loss",
        "mask",
        "forward_cosine",
        "backward_cosine",
    }
    # <S> the cat sat </S>
    assert output["mask"] == [True] * 5
    assert len(output["forward_cosine"]) == len(output["backward_cosine"]) == 5
    # The forward LM predicts nothing at </S>, the backward LM nothing at <S>.
    assert output["forward_cosine"][-1] == 0.0 and output["backward_cosine"][0] == 0.0
    for cosines in (output["forward_cosine"][:-1], output["backward_cosine"][1:]):
        assert all(-1.0 <= value <= 1.0 and value != 0.0 for value in cosines)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_losses_are_one_minus_the_mean_cosine(predictor, sentence):
    # The tiny biLM is trained with the cosine loss: 1 - cos per predicted position.
    output = predictor.predict(sentence)
    forward = numpy.array(output["forward_cosine"][:-1])
    backward = numpy.array(output["backward_cosine"][1:])
    assert len(forward) == len(sentence.split()) + 1
    numpy.testing.assert_allclose(output["forward_loss"], numpy.mean(1 - forward), rtol=1e-5)
    numpy.testing.assert_allclose(output["backward_loss"], numpy.mean(1 - backward), rtol=1e-5)
    numpy.testing.assert_allclose(
        output["loss"], (output["forward_loss"] + output["backward_loss"]) / 2, rtol=1e-6
    )


def test_a_batch_gives_each_sentence_its_own_result(predictor):
    batch = predictor.predict_batch_json([{"sentence": s} for s in SENTENCES])
    for sentence, result in zip(SENTENCES, batch):
        alone = predictor.predict(sentence)
        assert len(result["forward_cosine"]) == len(sentence.split()) + 2
        for key in ("forward_cosine", "backward_cosine"):
            numpy.testing.assert_allclose(result[key], alone[key], atol=1e-5)


def test_input_without_a_sentence_is_a_clear_error(predictor):
    with pytest.raises(ConfigurationError, match="needs a 'sentence' key"):
        predictor.predict_json({"text": "the cat"})


def test_allennlp_predict_command(elmoc_archive, predictor, tmp_path, monkeypatch):
    """`allennlp predict` through allennlp's `main`, in this process."""
    from allennlp.commands import main

    input_file = tmp_path / "input.jsonl"
    input_file.write_text("".join(json.dumps({"sentence": s}) + "\n" for s in SENTENCES))
    output_file = tmp_path / "predictions.jsonl"
    argv = [
        "allennlp",
        "predict",
        str(elmoc_archive),
        str(input_file),
        "--output-file",
        str(output_file),
        "--include-package",
        "elmoc_allennlp",
        "--silent",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    main(prog="allennlp")
    lines = [json.loads(line) for line in output_file.read_text().splitlines()]
    assert len(lines) == len(SENTENCES)
    for sentence, line in zip(SENTENCES, lines):
        expected = predictor.predict(sentence)
        numpy.testing.assert_allclose(line["forward_cosine"], expected["forward_cosine"], atol=1e-5)
        numpy.testing.assert_allclose(line["forward_loss"], expected["forward_loss"], rtol=1e-5)


def test_every_value_comes_with_its_token(predictor):
    outputs = predictor.predict_batch_json([{"sentence": s} for s in SENTENCES])
    for sentence, output in zip(SENTENCES, outputs):
        assert output["tokens"][1:-1] == sentence.split()
        assert len(output["tokens"]) == len(output["forward_cosine"]) == len(output["mask"])


def test_an_over_long_line_is_refused_by_its_number(predictor, monkeypatch):
    monkeypatch.setenv("ELMOC_PREDICT_MAX_TOKENS", "5")
    predictor._lines_read = 0
    predictor.load_line('{"sentence": "a b c"}')
    with pytest.raises(ConfigurationError) as raised:
        predictor.load_line('{"sentence": "a b c d e f"}')
    assert "input line 2 " in str(raised.value)
    assert "ELMOC_PREDICT_MAX_TOKENS" in str(raised.value)
