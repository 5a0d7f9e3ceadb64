"""Session-wide test fixtures: a tiny fastText model trained on the fixture corpus.

Test configs refer to it as `std.extVar("ELMOC_TEST_FASTTEXT")` and to the fixtures folder as
`std.extVar("ELMOC_TEST_FIXTURES")`; allennlp's `Params.from_file` reads ext vars from the
environment, so both are exported once for the whole session.

`ELMOC_TEST_THREADS=N` runs the suite with N intra-op threads (`torch.set_num_threads`, and
`OMP_NUM_THREADS` for the processes tests start); unset, PyTorch's default. Results that depend on
how BLAS splits work across threads show up when the suite is run at 1 and at 2 threads.
"""
import os
from pathlib import Path

import pytest
import torch

FIXTURES_ROOT = Path(__file__).parent / "fixtures"
LM_CORPUS = FIXTURES_ROOT / "lm_corpus"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

THREADS_VARIABLE = "ELMOC_TEST_THREADS"


def _requested_threads() -> int:
    value = os.environ.get(THREADS_VARIABLE, "")
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise pytest.UsageError(f"{THREADS_VARIABLE} must be a positive integer, got {value!r}")
    return threads


def pytest_configure(config) -> None:
    if os.environ.get(THREADS_VARIABLE):
        threads = _requested_threads()
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def pytest_report_header(config) -> str:
    source = THREADS_VARIABLE if os.environ.get(THREADS_VARIABLE) else "PyTorch's default"
    return f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads ({source})"


TINY_FASTTEXT_OPTIONS = dict(dim=16, min_count=1, minn=2, maxn=4, bucket=20000, epoch=5, thread=10)


@pytest.fixture(scope="session", autouse=True)
def tiny_fasttext_path(tmp_path_factory) -> Path:
    from elmoc_allennlp.common.fasttext_training import train_fasttext

    directory = tmp_path_factory.mktemp("fasttext")
    corpus = directory / "corpus.txt"
    corpus.write_text(
        "".join(path.read_text() for path in sorted(LM_CORPUS.glob("*.txt"))), encoding="utf-8"
    )
    path = train_fasttext(corpus, directory / "tiny.bin", **TINY_FASTTEXT_OPTIONS)
    os.environ["ELMOC_TEST_FASTTEXT"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def fixtures_root_environment() -> Path:
    """Exported as ELMOC_TEST_FIXTURES so test configs use absolute data paths."""
    os.environ["ELMOC_TEST_FIXTURES"] = str(FIXTURES_ROOT)
    return FIXTURES_ROOT
