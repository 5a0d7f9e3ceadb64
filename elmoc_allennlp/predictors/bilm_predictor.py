import json
from typing import Any, List

from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import Instance
from allennlp.data.fields import TextField
from allennlp.predictors.predictor import Predictor

from elmoc_allennlp.common.archives import limit_variable

MAX_TOKENS_VARIABLE = "ELMOC_PREDICT_MAX_TOKENS"
DEFAULT_MAX_TOKENS = 4096


@Predictor.register("elmoc_bilm")
class BidirectionalLanguageModelPredictor(Predictor):
    """
    Scores `{"sentence": "whitespace tokenized"}` (or a list of tokens) with a trained biLM: losses, `tokens`
    (boundaries included), mask and, for continuous heads, `forward_cosine` and `backward_cosine` per token.
    Malformed input, or more than `ELMOC_PREDICT_MAX_TOKENS` tokens, is an error naming the key and line.

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
        limit = limit_variable(MAX_TOKENS_VARIABLE, DEFAULT_MAX_TOKENS)
        length = len(sentence) if isinstance(sentence, list) else len(sentence.split())
        if length > limit:
            raise ConfigurationError(
                f"'sentence' has {length:,} tokens, past {MAX_TOKENS_VARIABLE} ({limit:,}): split "
                "it, or raise the limit if the memory allows"
            )

    def predict_instance(self, instance: Instance) -> JsonDict:
        return self.predict_batch_instance([instance])[0]

    def predict_batch_instance(self, instances: List[Instance]) -> List[JsonDict]:
        outputs = super().predict_batch_instance(instances)
        for instance, output in zip(instances, outputs):
            field = next(f for f in instance.fields.values() if isinstance(f, TextField))
            output["tokens"] = [token.text for token in field.tokens]
            # A batch pads the mask to its longest sentence: one value per token, as the cosines.
            if isinstance(output.get("mask"), list):
                output["mask"] = output["mask"][: len(output["tokens"])]
        return outputs

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        self.validate_json(json_dict)
        return self._dataset_reader.text_to_instance(json_dict["sentence"])  # type: ignore


def _wrong_type(problem: str, value: Any) -> ConfigurationError:
    text = repr(value)
    preview = text if len(text) <= 60 else text[:57] + "..."
    return ConfigurationError(f"{problem}, got {type(value).__name__} {preview}")
