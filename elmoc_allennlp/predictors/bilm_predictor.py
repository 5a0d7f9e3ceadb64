from allennlp.common.util import JsonDict
from allennlp.data import Instance
from allennlp.predictors.predictor import Predictor


@Predictor.register("elmoc_bilm")
class BidirectionalLanguageModelPredictor(Predictor):
    """
    Scores sentences with a trained biLM (`elmoc_bilm`).

    Input: `{"sentence": "a whitespace tokenized sentence"}`. Output: the model's forward and
    backward losses for the sentence, the mask and, for continuous heads, the per-position cosine
    between each prediction and its target vector (`forward_cosine`, `backward_cosine`; the
    positions include the `<S>` and `</S>` boundaries).

    Registered as a `Predictor` with name "elmoc_bilm".
    """

    def predict(self, sentence: str) -> JsonDict:
        return self.predict_json({"sentence": sentence})

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        if "sentence" not in json_dict:
            raise KeyError(f"elmoc_bilm predictor input needs a 'sentence' key, got {sorted(json_dict)}")
        return self._dataset_reader.text_to_instance(json_dict["sentence"])  # type: ignore
