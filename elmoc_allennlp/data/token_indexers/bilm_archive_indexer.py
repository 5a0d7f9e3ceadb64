from typing import Dict, List, Optional

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data.token_indexers.token_indexer import TokenIndexer

from elmoc_allennlp.common.bilm_inputs import CHARACTERS_INPUT, FASTTEXT_INPUT, PIECES_INPUT
from elmoc_allennlp.common.config_keys import naming_the_config_key
from elmoc_allennlp.common.portable_bilm import read_bilm_archive
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import (
    MAX_TOKEN_CHARACTERS,
    BilmInputIndexer,
    ElmocCharacterIndexer,
    ElmocPieceIndexer,
)
from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer


def pretraining_token_cap(archive) -> int:
    """Where a biLM archive's pretraining cut tokens: its indexer's or its reader's limit."""
    indexer = archive.config["dataset_reader"]["token_indexers"][archive.input_key]
    limits = (archive.max_token_characters, indexer.get("max_token_characters", MAX_TOKEN_CHARACTERS))
    return min(limit for limit in limits if limit is not None)


def _piece_vocabulary(archive, namespace: str) -> Dict[str, int]:
    """piece -> id of the archive's vocabulary namespace (a padded namespace: ids from 1)."""
    name = f"vocabulary/{namespace}.txt"
    path = archive.extracted.member(name)
    if path is None:
        raise ConfigurationError(
            f"biLM archive {archive.archive_file} has no {name} (model.text_field_embedder."
            f"token_embedders.{archive.input_key}.vocab_namespace)"
        )
    pieces = path.read_bytes().decode("utf-8").split("\n")
    if pieces and pieces[-1] == "":
        pieces.pop()
    return {piece: index + 1 for index, piece in enumerate(pieces)}


def archive_input_indexer(
    archive, lowercase_tokens: Optional[bool] = None, token_min_padding_length: int = 0
) -> BilmInputIndexer:
    """
    The indexer of a biLM archive's input kind (`ElmocArchive`), indexing as pretraining did.
    `lowercase_tokens` overrides the archive's lowercasing (`None`: as in pretraining).
    """
    max_token_characters = pretraining_token_cap(archive)
    if archive.input_kind == FASTTEXT_INPUT:
        return FastTextSubwordIndexer(
            vectors_path=archive.input_vectors_path,
            boundary_tokens=archive.boundary_tokens,
            lowercase_tokens=(
                archive.lowercase_tokens if lowercase_tokens is None else lowercase_tokens
            ),
            token_min_padding_length=token_min_padding_length,
            max_token_characters=max_token_characters,
        )
    if archive.input_kind == CHARACTERS_INPUT:
        return ElmocCharacterIndexer(bool(lowercase_tokens), token_min_padding_length)
    if archive.input_kind == PIECES_INPUT:
        from allennlp.data import Tokenizer

        reader = archive.config["dataset_reader"]
        tokenizer = Tokenizer.from_params(Params(dict(reader["tokenizer"])))
        embedder = archive.config["model"]["text_field_embedder"]["token_embedders"][archive.input_key]
        piece_ids = _piece_vocabulary(archive, embedder.get("vocab_namespace", "tokens"))
        return ElmocPieceIndexer(
            tokenizer,
            piece_ids,
            piece_ids.get("@@UNKNOWN@@", 1),
            bool(lowercase_tokens),
            max_token_characters,
            token_min_padding_length,
        )
    raise ConfigurationError(
        f"biLM archive {archive.archive_file}: no indexer for {archive.input_kind} input"
    )


@TokenIndexer.register("elmoc_bilm_inputs")
class BilmArchiveIndexer(BilmInputIndexer):
    """
    Indexes tokens for a trained biLM, in the role of ELMo's `elmo_characters`: each token becomes
    the ids the biLM's input was pretrained on, whatever its kind (fastText subwords, ELMo's
    characters or BPE pieces; see `common.bilm_inputs`), read from the biLM archive so that the
    indexer and the `elmoc_token_embedder` always agree. Long tokens are cut as in pretraining.
    The output has the single key `elmo_tokens` and no `mask`.

    Registered as a `TokenIndexer` with name "elmoc_bilm_inputs".

    # Parameters

    archive_file : `str`
        The ELMo-C biLM `model.tar.gz` (the same as the `elmoc_token_embedder`'s).
    vectors_path : `str`, optional (default = `None`)
        The biLM's fastText `.bin`, if it is not where the archive says.
    lowercase_tokens : `bool`, optional (default = `None`)
        Whether to lowercase tokens; `None` means as in pretraining.
    token_min_padding_length : `int`, optional (default = `0`)
        See :class:`TokenIndexer`.
    serialization_dir : `str`, optional (default = `None`)
        Given by allennlp when loading a downstream archive: its carried biLM config is read
        instead of `archive_file` (see `common/portable_bilm.py`).
    """

    def __init__(
        self,
        archive_file: str,
        vectors_path: Optional[str] = None,
        lowercase_tokens: Optional[bool] = None,
        token_min_padding_length: int = 0,
        serialization_dir: Optional[str] = None,
    ) -> None:
        archive = read_bilm_archive(archive_file, vectors_path, serialization_dir)
        self.input_kind = archive.input_kind
        self._archive_file = str(archive_file)
        self.kind_indexer = archive_input_indexer(archive, lowercase_tokens)
        super().__init__(
            self.kind_indexer.lowercase_tokens,
            self.kind_indexer.max_token_characters,
            token_min_padding_length,
        )

    @classmethod
    def from_params(
        cls, params: Params, constructor_to_call=None, constructor_to_inspect=None, **extras
    ):
        # Errors about the biLM archive name this indexer's config key.
        with naming_the_config_key(params):
            return super().from_params(
                params,
                constructor_to_call=constructor_to_call,
                constructor_to_inspect=constructor_to_inspect,
                **extras,
            )

    def token_ids(self, text: str) -> List[int]:
        return self.kind_indexer.token_ids(text)
