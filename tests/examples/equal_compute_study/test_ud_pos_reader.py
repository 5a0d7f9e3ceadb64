from pathlib import Path

import pytest

from allennlp.common.checks import ConfigurationError

from examples.equal_compute_study.ud_pos_reader import UniversalDependenciesPosReader

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "downstream" / "ud_pos.conllu"


def test_reads_words_and_upos_skipping_ranges_and_empty_nodes():
    instances = list(UniversalDependenciesPosReader().read(str(FIXTURE)))
    assert [[t.text for t in i["tokens"].tokens] for i in instances] == [
        ["The", "bank", "raised", "rates", "."],
        ["do", "n't", "sell", "stock"],
    ]
    assert [i["tags"].labels for i in instances] == [
        ["DET", "NOUN", "VERB", "NOUN", "PUNCT"],
        ["AUX", "PART", "VERB", "NOUN"],
    ]


def test_a_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.conllu"
    path.write_text("1\tThe\tthe\tDET\n")
    with pytest.raises(ConfigurationError, match=r"bad.conllu, line 1"):
        list(UniversalDependenciesPosReader().read(str(path)))
