import json
from typing import Any

from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import Instance
from allennlp.predictors.predictor import Predictor


@Predictor.register("elmoc_bilm")
class BidirectionalLanguageModelPredictor(Predictor):
    """
    Scores sentences with a trained biLM (`elmoc_bilm`).

    Input: `{"sentence": "a whitespace tokenized sentence"}` (or a list of tokens). Output: the
    model's forward and backward losses, the mask and, for continuous heads, the per-position
    cosine between each prediction and its target (`forward_cosine`, `backward_cosine`).
    Malformed input raises a `ConfigurationError` naming the key and, under `allennlp predict`,
    the input line (counting non-blank lines).

    Registered as a `Predictor` with name "elmoc_bilm".
    """

    _lines_read = 0

    def load_line(self, line: str) -> JsonDict:
        self._lines_read += 1
        where = f"input line {self._lines_read} (not counting blank lines)"
        try:
            json_dict = json.loads(line)
        except (ValueError, RecursionError) as error:
            raise ConfigurationError(f"{where}: not valid JSON ({str(error)[:100]})") from None
        try:
            self.validate_json(json_dict)
        except ConfigurationError as error:
            raise ConfigurationError(f"{where}: {error.message}") from None
        return json_dict

    def predict(self, sentence: str) -> JsonDict:
        return self.predict_json({"sentence": sentence})

    def validate_json(self, json_dict: Any) -> None:
        """Raises a `ConfigurationError` naming the key if `json_dict` is not a valid input."""
        if not isinstance(json_dict, dict):
            raise _wrong_type('expected a JSON object like {"sentence": "the bank"}', json_dict)
        if "sentence" not in json_dict:
            raise ConfigurationError(
                f"elmoc_bilm predictor input needs a 'sentence' key, got {sorted(json_dict)}"
            )
        sentence = json_dict["sentence"]
        if not isinstance(sentence, (str, list)):
            raise _wrong_type("'sentence' must be a string (or a list of token strings)", sentence)
        for index, token in enumerate(sentence if isinstance(sentence, list) else []):
            if not isinstance(token, str):
                raise _wrong_type(f"'sentence'[{index}] must be a token string", token)

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        self.validate_json(json_dict)
        return self._dataset_reader.text_to_instance(json_dict["sentence"])  # type: ignore


def _wrong_type(problem: str, value: Any) -> ConfigurationError:
    text = repr(value)
    preview = text if len(text) <= 60 else text[:57] + "..."
    return ConfigurationError(f"{problem}, got {type(value).__name__} {preview}")
