"""
A biLM archive's own fastText model: a copy is accepted, another model refused
(`elmoc_bilm_from_archive`, `elmoc_archive_fasttext`).
"""

import shutil
from pathlib import Path

import pytest

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.finetune.archive_fasttext import (
    ArchiveFastTextIndexer,
    BilmFromArchive,
    same_fasttext_model,
)


def test_a_different_fasttext_model_is_refused(base_archive, other_fasttext, tiny_fasttext_path):
    assert not same_fasttext_model(other_fasttext, tiny_fasttext_path)
    with pytest.raises(ConfigurationError, match=r"model\.vectors_path\) is not the one"):
        BilmFromArchive.from_archive(str(base_archive), vectors_path=str(other_fasttext))
    with pytest.raises(ConfigurationError, match="is not the one"):
        ArchiveFastTextIndexer(str(base_archive), vectors_path=str(other_fasttext))


def test_a_copy_of_the_archives_fasttext_model_is_accepted(
    base_archive, tiny_fasttext_path, tmp_path
):
    copy = Path(shutil.copy(tiny_fasttext_path, tmp_path / "copy.bin"))
    assert same_fasttext_model(copy, tiny_fasttext_path)
    model = BilmFromArchive.from_archive(str(base_archive), vectors_path=str(copy))
    assert model._text_field_embedder._token_embedders["fasttext"].vectors.path == copy
    indexer = ArchiveFastTextIndexer(str(base_archive), vectors_path=str(copy))
    assert indexer.vectors.path == copy
