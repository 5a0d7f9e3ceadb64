from typing import Dict, Iterable, List, Optional, Tuple

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.data import DatasetReader, Instance, TokenIndexer
from allennlp.data.fields import MetadataField, SequenceLabelField, TextField
from allennlp.data.token_indexers import SingleIdTokenIndexer
from allennlp.data.tokenizers import Token


def read_conllu_sentences(file_path: str) -> Iterable[Tuple[List[str], List[str]]]:
    """
    `(words, upos_tags)` of every sentence of a CoNLL-U file: syntactic words only (multiword token
    ranges `1-2` and empty nodes `1.1` are skipped), FORM and UPOS columns.
    """
    words: List[str] = []
    tags: List[str] = []
    with open(cached_path(file_path), encoding="utf-8") as conllu:
        for line_number, line in enumerate(conllu, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                if words:
                    yield words, tags
                words, tags = [], []
                continue
            if line.startswith("#"):
                continue
            columns = line.split("\t")
            if len(columns) != 10:
                raise ConfigurationError(
                    f"{file_path}, line {line_number}: a CoNLL-U word line has 10 tab-separated "
                    f"columns, this one has {len(columns)}"
                )
            if "-" in columns[0] or "." in columns[0]:
                continue
            words.append(columns[1])
            tags.append(columns[3])
    if words:
        yield words, tags


@DatasetReader.register("elmoc_ud_pos")
class UniversalDependenciesPosReader(DatasetReader):
    """
    Part-of-speech tagging from a Universal Dependencies CoNLL-U file (e.g. UD English-EWT): one
    instance per sentence with `tokens` (the FORM column) and `tags` (UPOS), the fields of
    allennlp-models' taggers (`crf_tagger`, `simple_tagger`). allennlp-models' own
    `universal_dependencies` reader is for the dependency parser (fields `words`, `pos_tags`,
    heads), which the taggers do not read.

    Registered as a `DatasetReader` with name "elmoc_ud_pos".

    # Parameters

    token_indexers : `Dict[str, TokenIndexer]`, optional (default = `{"tokens": SingleIdTokenIndexer()}`)
    """

    def __init__(self, token_indexers: Optional[Dict[str, TokenIndexer]] = None, **kwargs) -> None:
        super().__init__(
            manual_distributed_sharding=True, manual_multiprocess_sharding=True, **kwargs
        )
        self._token_indexers = token_indexers or {"tokens": SingleIdTokenIndexer()}

    def _read(self, file_path: str) -> Iterable[Instance]:
        sentences = read_conllu_sentences(file_path)
        for words, tags in self.shard_iterable(sentences):
            yield self.text_to_instance(words, tags)

    def text_to_instance(self, words: List[str], tags: Optional[List[str]] = None) -> Instance:
        tokens = TextField([Token(word) for word in words])
        fields = {"tokens": tokens, "metadata": MetadataField({"words": words})}
        if tags is not None:
            fields["tags"] = SequenceLabelField(tags, tokens, label_namespace="labels")
        return Instance(fields)

    def apply_token_indexers(self, instance: Instance) -> None:
        instance.fields["tokens"].token_indexers = self._token_indexers  # type: ignore
