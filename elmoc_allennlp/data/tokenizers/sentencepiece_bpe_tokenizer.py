"""The SentencePiece BPE tokenizer (Kudo & Richardson, 2018) of ELMo-Sub, Li et al. (2019)."""

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import CACHE_DIRECTORY
from allennlp.data.tokenizers import Token, Tokenizer

from elmoc_allennlp.data.dataset_readers.corpus_shares import corpus_files

logger = logging.getLogger(__name__)

# Where BPE models trained from a config are cached.
DEFAULT_BPE_CACHE = os.path.join(CACHE_DIRECTORY, "elmoc_sentencepiece")


def _corpus_files(train_data_path: Union[str, Sequence[str]]) -> List[str]:
    """The reader's files of `train_data_path` (its hidden corpus indexes left out)."""
    try:
        return corpus_files(train_data_path)
    except ConfigurationError as error:
        raise ConfigurationError(
            f"tokenizer.train_data_path {train_data_path!r} matches no files ({error})"
        ) from None


def train_sentencepiece_bpe(
    train_data_path: Union[str, Sequence[str]],
    model_path: Union[str, os.PathLike],
    vocab_size: int = 32000,
    max_training_sentences: int = 2_000_000,
    character_coverage: float = 1.0,
    num_threads: int = 2,
) -> Path:
    """
    Trains a BPE model (no piece across spaces, bytes for unknown characters) into `model_path`, atomically.

    # Parameters

    train_data_path : `Union[str, Sequence[str]]`
        Corpus files: a file, a directory, a glob pattern, or a list of them.
    model_path : `Union[str, os.PathLike]`
        Where to write the `.model`.
    vocab_size : `int`, optional (default = `32000`)
        The number of pieces ("~30K" in the paper), the 256 byte pieces included; at most.
    max_training_sentences : `int`, optional (default = `2_000_000`)
        Lines sampled (uniformly) from the corpus for training.
    character_coverage : `float`, optional (default = `1.0`)
        Fraction of characters given their own piece; the rest are spelled in bytes.
    num_threads : `int`, optional (default = `2`)
        SentencePiece's training threads.
    """
    import sentencepiece

    files = _corpus_files(train_data_path)
    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_path.parent, prefix=".bpe-") as temporary_directory:
        prefix = os.path.join(temporary_directory, "bpe")
        sentencepiece.SentencePieceTrainer.train(
            input=",".join(files),
            model_prefix=prefix,
            vocab_size=vocab_size,
            model_type="bpe",
            character_coverage=character_coverage,
            byte_fallback=True,
            normalization_rule_name="identity",
            split_by_whitespace=True,
            hard_vocab_limit=False,
            input_sentence_size=max_training_sentences,
            shuffle_input_sentence=True,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            num_threads=num_threads,
            minloglevel=2,
        )
        os.replace(prefix + ".vocab", model_path.with_suffix(".vocab"))
        os.replace(prefix + ".model", model_path)
    return model_path


@Tokenizer.register("elmoc_sentencepiece_bpe")
class SentencePieceBpeTokenizer(Tokenizer):
    """
    Splits whitespace-tokenized text into SentencePiece BPE pieces for a `single_id` indexer (a word's
    first begins with `▁`). Without a model at `model_path`, one is trained on `train_data_path` and
    written there, or to a cache file named after the corpus and the settings in `DEFAULT_BPE_CACHE`.

    Registered as a `Tokenizer` with name "elmoc_sentencepiece_bpe".

    # Parameters

    model_path : `str`, optional (default = `None`)
        A SentencePiece `.model` file, loaded if it exists, else trained and written there. `None`:
        the cache file named after the corpus and the settings, in `DEFAULT_BPE_CACHE`.
    train_data_path : `Union[str, List[str]]`, optional (default = `None`)
        The corpus to train on when there is no model yet: a file, a directory, a glob pattern, or a
        list of them. Needed only then (a missing model without it is an error).
    vocab_size : `int`, optional (default = `32000`)
        Training: the number of pieces, the 256 byte pieces included, at most ("~30K" in Li et al.
        2019 for ELMo-Sub).
    max_training_sentences : `int`, optional (default = `2_000_000`)
        Training: lines sampled uniformly from the corpus, enough for the pieces' statistics while
        keeping SentencePiece's memory bounded.
    character_coverage : `float`, optional (default = `1.0`)
        Training: the fraction of characters given their own piece; the rest are spelled in bytes.
        `1.0` (every character) suits English; lower values suit large character sets.
    """

    def __init__(
        self,
        model_path: Optional[str] = None,
        train_data_path: Optional[Union[str, List[str]]] = None,
        vocab_size: int = 32000,
        max_training_sentences: int = 2_000_000,
        character_coverage: float = 1.0,
    ) -> None:
        if model_path is None or not os.path.exists(model_path):
            if train_data_path is None:
                raise ConfigurationError(
                    f"tokenizer.model_path {model_path} does not exist; set train_data_path"
                )
            settings = dict(
                vocab_size=vocab_size,
                max_training_sentences=max_training_sentences,
                character_coverage=character_coverage,
            )
            if model_path is None:
                model_path = self._cache_path(train_data_path, settings)
            if not os.path.exists(model_path):
                logger.info(
                    "Training a SentencePiece BPE model (%s) on %s", settings, train_data_path
                )
                train_sentencepiece_bpe(train_data_path, model_path, **settings)  # type: ignore
        self.model_path = str(model_path)
        self._load()

    @staticmethod
    def _cache_path(train_data_path: Union[str, List[str]], settings: Dict[str, Any]) -> str:
        files = _corpus_files(train_data_path)
        stats = [
            (os.path.abspath(path), os.path.getsize(path), os.path.getmtime(path)) for path in files
        ]
        key = hashlib.sha256(json.dumps([stats, settings], sort_keys=True).encode()).hexdigest()
        return os.path.join(DEFAULT_BPE_CACHE, f"bpe-{settings['vocab_size']}-{key[:16]}.model")

    def _load(self) -> None:
        import sentencepiece

        self._processor = sentencepiece.SentencePieceProcessor(model_file=self.model_path)

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_processor"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._load()

    @property
    def vocab_size(self) -> int:
        """The number of pieces (byte pieces and `<unk>` included)."""
        return self._processor.get_piece_size()

    def tokenize_words(self, words: List[str]) -> Tuple[List[Token], List[int]]:
        """All the pieces of `words`, and the index of each word's first piece among them."""
        tokens: List[Token] = []
        first_pieces: List[int] = []
        for pieces in self._processor.encode(list(words), out_type=str):
            first_pieces.append(len(tokens))
            tokens.extend(Token(piece) for piece in pieces)
        return tokens, first_pieces

    def tokenize(self, text: str) -> List[Token]:
        return self.tokenize_words(text.split())[0]

    def detokenize(self, tokens: List[Union[Token, str]]) -> str:
        """The text of `tokens` (pieces), words separated by single spaces."""
        pieces = [token.text if isinstance(token, Token) else token for token in tokens]
        return self._processor.decode_pieces(pieces)
