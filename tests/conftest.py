"""Session-wide test fixtures: a tiny fastText model trained on the fixture corpus, and a tiny
ELMo-C biLM archive pretrained with it (for the tests of everything that takes an archive).

Test configs refer to it as `std.extVar("ELMOC_TEST_FASTTEXT")` and to the fixtures folder as
`std.extVar("ELMOC_TEST_FIXTURES")`; allennlp's `Params.from_file` reads ext vars from the
environment, so both are exported once for the whole session.

`ELMOC_TEST_THREADS=N` runs the suite with N intra-op threads (`torch.set_num_threads`, and
`OMP_NUM_THREADS` for the processes tests start); unset, one in each pytest-xdist worker and
PyTorch's default in a run without workers. Results that depend on how BLAS splits work across
threads show up when the suite is run at 1 and at 2 threads.

Trained fixtures are built once per test run, also under pytest-xdist (`make test` runs two
workers): `shared_build` builds each under a file lock in a folder every worker of the run sees,
and the other workers wait for it and read it. `ELMOC_TEST_FIXTURE_CACHE=DIR` keeps them in DIR
across runs instead, keyed by a hash of what they are built from (the package's and the test
fixtures' files): `make mutation` uses it, so that each mutant's run does not retrain them.
"""

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import pytest

FIXTURES_ROOT = Path(__file__).parent / "fixtures"
LM_CORPUS = FIXTURES_ROOT / "lm_corpus"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "elmoc_allennlp"

THREADS_VARIABLE = "ELMOC_TEST_THREADS"
CACHE_VARIABLE = "ELMOC_TEST_FIXTURE_CACHE"


def _requested_threads() -> int:
    value = os.environ.get(THREADS_VARIABLE, "")
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise pytest.UsageError(f"{THREADS_VARIABLE} must be a positive integer, got {value!r}")
    return threads


def _import_each_package_once() -> None:
    """
    allennlp's `import_module_and_submodules` (every `allennlp` command's plugins and
    `--include-package`, and many tests) walks the whole package again on every call, clearing
    the import system's caches once per module: seconds for `allennlp_models` each time an
    `allennlp` command runs in this process. Within the test process, a package already imported
    whole (same package, exclusions and working folder, still in `sys.modules`) is not walked
    again: what it registers is registered already.
    """
    import sys

    import allennlp.commands
    import allennlp.common.plugins
    import allennlp.common.util as util

    original = util.import_module_and_submodules
    if getattr(original, "imports_each_package_once", False):
        return
    done = set()

    def import_module_and_submodules(package_name: str, exclude=None) -> None:
        key = (package_name, frozenset(exclude or ()), os.getcwd())
        if key in done and package_name in sys.modules:
            return
        original(package_name, exclude)
        done.add(key)

    import_module_and_submodules.imports_each_package_once = True
    for module in (util, allennlp.common.plugins, allennlp.commands):
        module.import_module_and_submodules = import_module_and_submodules


def _is_xdist_controller(config) -> bool:
    """The pytest-xdist process that only hands tests to its workers (and runs none itself)."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "needs_meta_device: builds modules on the meta device")
    if _is_xdist_controller(config):
        # torch, allennlp and the plugin are imported where tests run: importing them here too
        # costs the run ~8 s before any worker starts.
        return
    import torch

    _import_each_package_once()
    if os.environ.get(THREADS_VARIABLE):
        threads = _requested_threads()
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        threads = 1  # one per worker: `make test` runs as many workers as cores
    else:
        return
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


# The modules that take longest (pytest --durations, both environments), run first: pytest-xdist
# hands a worker a module at a time in collection order, and a long module handed out last is a
# run's tail with the other worker idle (~15 s of `make test`'s ~5 min).
LONGEST_MODULES_FIRST = [
    "tests/test_docs.py",
    "tests/training_configs/downstream/test_allennlp_models_configs.py",
    "tests/test_good_guest.py",
    "tests/benchmarks/test_gpu_check.py",
    "tests/distributed/test_distributed_training.py",
    "tests/common/test_threads.py",
]


def pytest_collection_modifyitems(config, items) -> None:
    """
    The longest modules first (`LONGEST_MODULES_FIRST`), each module's tests still together and in
    their order. The published environment's torch 1.12 cannot build modules on the meta device (the
    plugin refuses it there: tests/common/test_torch_versions.py); the paper-size parameter counts
    that need it are checked in the modern environment.
    """
    from elmoc_allennlp.common import torch_versions

    def rank(item) -> int:
        module = Path(str(item.path)).relative_to(config.rootpath).as_posix()
        if module in LONGEST_MODULES_FIRST:
            return LONGEST_MODULES_FIRST.index(module)
        return len(LONGEST_MODULES_FIRST)

    items.sort(key=rank)  # stable: the rest stays in collection order

    if torch_versions.TORCH_VERSION < (2, 0):
        skip = pytest.mark.skip(reason="the meta device needs torch >= 2.0")
        for item in items:
            if "needs_meta_device" in item.keywords:
                item.add_marker(skip)


def pytest_report_header(config) -> str:
    """The environment and thread count, told without importing torch in pytest-xdist's controller."""
    import platform
    from importlib.metadata import version

    torch_version = version("torch")
    workers = _is_xdist_controller(config) or os.environ.get("PYTEST_XDIST_WORKER")
    if os.environ.get(THREADS_VARIABLE):
        threads, source = _requested_threads(), THREADS_VARIABLE
    elif workers:
        threads, source = 1, "one per pytest-xdist worker"
    else:
        import torch

        threads, source = torch.get_num_threads(), "PyTorch's default"
    environment = "published" if int(torch_version.split(".")[0]) < 2 else "modern"
    return (
        f"environment: {environment} (CPython {platform.python_version()}, torch {torch_version}), "
        f"{threads} intra-op threads ({source})"
    )


def _sources_digest() -> str:
    """A hash of every file a trained fixture can depend on: the package and the test fixtures."""
    digest = hashlib.sha256()
    for root, pattern in (
        (PACKAGE_ROOT, "*.py"),
        (FIXTURES_ROOT, "*"),
        (PACKAGE_ROOT.parent / "training_configs", "*"),
    ):
        for path in sorted(root.rglob(pattern)):
            # Hidden files are written by the runs themselves (corpus indexes beside the corpus),
            # and so are files beside the package's modules (mutmut's results).
            if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith("."):
                digest.update(str(path.relative_to(root.parent)).encode("utf-8") + b"\0")
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def shared_build(
    tmp_path_factory, name: str, build: Callable[[Path], None], key: Optional[Any] = None
) -> Path:
    """
    The folder `name`, filled by `build(folder)` once per test run and shared by every pytest-xdist
    worker of the run (the first to ask builds it under a file lock; the others wait and reuse
    it); with `ELMOC_TEST_FIXTURE_CACHE`, once per content of the sources and `key`. A failed build
    leaves nothing behind, so the next worker to ask builds it again (and fails the same way).
    """
    from filelock import FileLock

    cache = os.environ.get(CACHE_VARIABLE)
    if cache:
        tag = hashlib.sha256(repr((_sources_digest(), key)).encode("utf-8")).hexdigest()[:16]
        root = Path(cache) / f"{name}-{tag}"
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        # Every worker's basetemp is a folder of the run's own (pytest-xdist's documented pattern).
        root = tmp_path_factory.getbasetemp().parent / "shared-fixtures" / name
    else:
        root = tmp_path_factory.getbasetemp() / "shared-fixtures" / name
    root.parent.mkdir(parents=True, exist_ok=True)
    folder, done = root / "built", root / "built.done"
    with FileLock(str(root) + ".lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


TINY_FASTTEXT_OPTIONS = dict(dim=16, min_count=1, minn=2, maxn=4, bucket=20000, epoch=5, thread=10)


def train_tiny_fasttext(directory: Path, name: str, **options) -> Path:
    """A tiny fastText model trained on the whole fixture corpus, `directory/name`."""
    from elmoc_allennlp.fasttext.training import train_fasttext

    corpus = directory / "corpus.txt"
    corpus.write_text(
        "".join(path.read_text() for path in sorted(LM_CORPUS.glob("*.txt"))), encoding="utf-8"
    )
    return train_fasttext(corpus, directory / name, **dict(TINY_FASTTEXT_OPTIONS, **options))


@pytest.fixture(scope="session", autouse=True)
def tiny_fasttext_path(tmp_path_factory) -> Path:
    folder = shared_build(
        tmp_path_factory,
        "fasttext",
        lambda directory: train_tiny_fasttext(directory, "tiny.bin"),
        TINY_FASTTEXT_OPTIONS,
    )
    path = folder / "tiny.bin"
    os.environ["ELMOC_TEST_FASTTEXT"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def fixtures_root_environment() -> Path:
    """Exported as ELMOC_TEST_FIXTURES so test configs use absolute data paths."""
    os.environ["ELMOC_TEST_FIXTURES"] = str(FIXTURES_ROOT)
    return FIXTURES_ROOT


@pytest.fixture
def one_torch_thread():
    """
    These tests run tiny tensors on shared 2-core machines, where a second intra-op thread only
    spins: one thread makes them several times faster.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def elmoc_archive(tiny_fasttext_path, tmp_path_factory) -> Path:
    """A tiny trained ELMo-C biLM: 16-d fastText input, 2 layers, projection 6 (output 12)."""
    from allennlp.commands.train import train_model_from_file
    from allennlp.common.util import import_module_and_submodules

    # What `--include-package elmoc_allennlp` registers.
    import_module_and_submodules("elmoc_allennlp")

    def train(folder: Path) -> None:
        import torch

        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            train_model_from_file(
                str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
                str(folder / "run"),
                overrides=json.dumps({"trainer.num_epochs": 1}),
            )
        finally:
            torch.set_num_threads(previous)

    # Keyed by the .bin it was trained with: its config records that path.
    return (
        shared_build(tmp_path_factory, "elmoc_bilm", train, str(tiny_fasttext_path))
        / "run"
        / "model.tar.gz"
    )


def rewrite_archive(
    source: Path, destination: Path, edit_config: Callable[[Dict[str, Any]], None]
) -> Path:
    """Copies a model archive, changing its config.json with `edit_config` (in place)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source, "r:gz") as original, tarfile.open(destination, "w:gz") as copy:
        for member in original:
            data = original.extractfile(member) if member.isfile() else None
            if member.name == "config.json":
                config = json.load(data)
                edit_config(config)
                encoded = json.dumps(config, indent=2).encode("utf-8")
                member.size = len(encoded)
                data = io.BytesIO(encoded)
            copy.addfile(member, data)
    return destination


@pytest.fixture(scope="session")
def relocated_archive(elmoc_archive, tiny_fasttext_path, tmp_path_factory) -> Path:
    """
    The tiny archive as if moved from another machine: its config points at fastText paths that
    do not exist here, and the .bin sits in a sibling folder, `<root>/fasttext/tiny.bin`, next to
    `<root>/bilm/model.tar.gz`.
    """
    root = tmp_path_factory.mktemp("moved")
    elsewhere = "/nonexistent/other_machine/fasttext/" + tiny_fasttext_path.name

    def point_elsewhere(config: Dict[str, Any]) -> None:
        config["dataset_reader"]["token_indexers"]["fasttext"]["vectors_path"] = elsewhere
        embedders = config["model"]["text_field_embedder"]["token_embedders"]
        embedders["fasttext"]["vectors_path"] = elsewhere

    (root / "fasttext").mkdir()
    shutil.copy(tiny_fasttext_path, root / "fasttext" / tiny_fasttext_path.name)
    return rewrite_archive(elmoc_archive, root / "bilm" / "model.tar.gz", point_elsewhere)
