"""
The equal-compute study (examples/equal_compute_study/run_study.py) and the downstream grid it
shares with the quality-vs-time study (examples/common.py): the data subsets, the overrides, the
table and the shared helpers, without training.
"""

from argparse import Namespace
from pathlib import Path

import pytest

from examples import common
from examples.equal_compute_study import run_study as study
from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_subsets_keep_the_first_examples_of_each_format(tmp_path):
    conll = tmp_path / "eng.train"
    conll.write_text(
        "-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\n"
        "Peter NNP I-NP I-PER\n\nBonn NNP I-NP I-LOC\n"
    )
    common.make_subset(conll, tmp_path / "ner.txt", "ner", 2)
    assert (
        tmp_path / "ner.txt"
    ).read_text() == "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nPeter NNP I-NP I-PER\n"
    sst = tmp_path / "train.txt"
    sst.write_text("(3 (2 a) (3 b))\n(1 (1 c) (2 d))\n(2 e)\n")
    common.make_subset(sst, tmp_path / "sst.txt", "sst5", 2)
    # SST files are sorted by label: a fixed random sample, kept in file order.
    lines = (tmp_path / "sst.txt").read_text().splitlines()
    source = sst.read_text().splitlines()
    assert (
        len(lines) == 2 and sorted(lines, key=source.index) == lines and set(lines) <= set(source)
    )
    common.make_subset(sst, tmp_path / "sst_again.txt", "sst5", 2)
    assert (tmp_path / "sst_again.txt").read_text().splitlines() == lines
    conllu = REPO_ROOT / "tests" / "fixtures" / "downstream" / "ud_pos.conllu"
    common.make_subset(conllu, tmp_path / "pos.conllu", "pos", 1)
    assert (tmp_path / "pos.conllu").read_text().count("# sent_id") == 1


def test_overrides_seed_epochs_lowercasing_and_batch_size():
    args = Namespace(epochs=3, lowercase=True, batch_size=16, task_epochs={"ner": 4})
    sst = common.overrides("sst5", 7, args, use_bilm=True)
    assert sst["random_seed"] == sst["numpy_seed"] == sst["pytorch_seed"] == 7
    assert sst["trainer.num_epochs"] == 3 and sst["dataset_reader.use_subtrees"] is False
    assert sst["dataset_reader.token_indexers.elmoc.lowercase_tokens"] is True
    assert sst["validation_dataset_reader.token_indexers.elmoc.lowercase_tokens"] is True
    assert sst["data_loader.batch_sampler.batch_size"] == 16
    ner = common.overrides("ner", 1, args, use_bilm=False)
    assert "dataset_reader.token_indexers.elmo.lowercase_tokens" not in ner
    assert ner["data_loader.batch_size"] == 16 and ner["trainer.num_epochs"] == 4


def test_table_means_and_stds_in_percent():
    results = {
        "settings": {"tasks": ["pos"], "models": ["fastText", "ELMo-C"], "seeds": [1, 2]},
        "pretraining": [
            {
                "model": "ELMo-C",
                "pretraining_minutes": 8.8,
                "trainable_parameters": 1234,
                "tokens_per_second": 400,
                "intrinsic": "x",
            }
        ],
        "runs": [
            {"task": "pos", "model": "fastText", "seed": 1, "dev": 0.5, "test": 0.4},
            {"task": "pos", "model": "fastText", "seed": 2, "dev": 0.7, "test": 0.6},
            {"task": "pos", "model": "ELMo-C", "seed": 1, "dev": 0.8, "test": 0.9},
        ],
    }
    lines = study.table(results).splitlines()
    assert lines[2] == "| fastText | - | - | - | - | 60.0 ± 14.1 | 50.0 ± 14.1 |"
    assert lines[3] == "| ELMo-C | 8.8 | 1,234 | 400 | x | 80.0 | 90.0 (1 seeds) |"


def test_pretraining_token_files_shared_and_per_model():
    names = ["ELMo", "ELMo-C", "ELMo-C (equal time)"]
    files = study.pretraining_token_files(
        names, ["ptb.train10k.txt", "ELMo-C (equal time)=ptb.train.txt"]
    )
    assert files == {
        "ELMo": "ptb.train10k.txt",
        "ELMo-C": "ptb.train10k.txt",
        "ELMo-C (equal time)": "ptb.train.txt",
    }
    assert study.pretraining_token_files(names, []) == {name: None for name in names}
    with pytest.raises(SystemExit, match="ELMo-X"):
        study.pretraining_token_files(names, ["ELMo-X=ptb.train.txt"])
    with pytest.raises(SystemExit, match="one PATH"):
        study.pretraining_token_files(names, ["a.txt", "b.txt"])


def test_allennlp_durations_and_token_counts(tmp_path):
    assert common.seconds_of("0:00:03.5") == 3.5
    assert common.seconds_of("2:01:00") == 2 * 3600 + 60
    text = tmp_path / "text.txt"
    text.write_text("a b c\n\n d  e \n")
    assert common.count_tokens(str(text)) == 5 and common.count_tokens(None) is None


def test_the_quality_study_loads_no_other_studys_driver():
    """
    Importing the quality study's driver loads no module of the equal-compute study.

    A fresh process (`tests/fresh_process.py`) imports the driver: which modules an import loads
    is only seen where none are loaded yet.
    """
    code = (
        "import sys, examples.quality_vs_time.run_study; "
        "print(' '.join(m for m in sys.modules if m.startswith('examples')))"
    )
    completed = run_python(["-c", code], cwd=REPO_ROOT, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    loaded = set(completed.stdout.split())
    assert loaded == {
        "examples",
        "examples.common",
        "examples.quality_vs_time",
        "examples.quality_vs_time.run_study",
    }
