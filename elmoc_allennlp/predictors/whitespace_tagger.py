from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import DatasetReader, Instance
from allennlp.data.tokenizers import WhitespaceTokenizer
from allennlp.models import Model
from allennlp.predictors.predictor import Predictor
from allennlp.predictors.sentence_tagger import SentenceTaggerPredictor


@Predictor.register("elmoc_sentence_tagger")
class WhitespaceSentenceTaggerPredictor(SentenceTaggerPredictor):
    """
    allennlp's `sentence_tagger` on whitespace tokens, as CoNLL-2003 text is (the stock one downloads
    spaCy's `en_core_web_sm`). Input: `{"sentence": "a whitespace tokenized sentence"}`.

    Registered as a `Predictor` with name "elmoc_sentence_tagger".

    # Parameters

    model : `Model`
        The tagger loaded from the archive (given by `allennlp predict`).
    dataset_reader : `DatasetReader`
        The archive's validation dataset reader, whose `text_to_instance` takes the sentence's
        whitespace tokens (given by `allennlp predict`).
    """

    def __init__(self, model: Model, dataset_reader: DatasetReader) -> None:
        # The stock constructor would load the spaCy model: skipped.
        Predictor.__init__(self, model, dataset_reader)
        self._tokenizer = WhitespaceTokenizer()

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        sentence = json_dict.get("sentence") if isinstance(json_dict, dict) else None
        if not isinstance(sentence, str):
            raise ConfigurationError(
                'elmoc_sentence_tagger: each input line must be {"sentence": "a whitespace '
                f'tokenized sentence"}}, got {json_dict!r:.200}'
            )
        return self._dataset_reader.text_to_instance(self._tokenizer.tokenize(sentence))
