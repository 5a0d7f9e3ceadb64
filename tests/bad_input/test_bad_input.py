"""
The bad-input suite: inputs a new user (or an attacker) may give the CLI, the configs, the
Python API and the archives, each with the error it must raise, words its message must contain
(the file, line or config key at fault) and what must be unchanged on disk afterwards.

`CASES` is the table: one `Case` per input. Every case also checks two invariants: nothing was
written outside the case's sandbox (the folder crafted archives point at stays empty and no file
named `ESCAPE_NAME` exists anywhere under pytest's temporary root), and no temporary folder was
left behind (`tempfile`'s folder, redirected into the sandbox, holds at most the extractions
`read_archive` keeps for the process, and nothing once they are removed as at exit).

The tiny archives are built once per session (`conftest.py`); the whole suite runs in well under
a minute, one command-line case (`allennlp evaluate` in a fresh process) included.
"""

import errno
import hashlib
import json
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np
import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import (
    _OPENED,
    CorruptArchiveError,
    UnsafeArchiveError,
    extract_archive,
    remove_extracted_archives,
)
from elmoc_allennlp.common.disk_full import DiskFullError
from elmoc_allennlp.hardening.quiet_log_files import quiet_full_log_files
from elmoc_allennlp.fasttext.vectors import (
    FastTextFormatError,
    FastTextVectors,
    clear_fasttext_cache,
)
from benchmarks.common import write_fasttext_bin
from tests.bad_input.conftest import ESCAPE_NAME, write_archive
from tests.conftest import FIXTURES_ROOT
from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[2]
DOWNSTREAM_CONFIGS = REPO_ROOT / "training_configs" / "downstream"
DOWNSTREAM_FIXTURES = FIXTURES_ROOT / "downstream"


# ---------------------------------------------------------------------- the table


@dataclass
class Case:
    """
    `run(sandbox)` gives the bad input; it must raise `error` whose message contains every one
    of `words` (`{name}` is replaced by `sandbox.paths[name]`); afterwards the files and folders
    `unchanged` (relative to the sandbox, `"."` for all of it) must be as they were before, the
    files `absent` must not exist and the checkpoint files `intact` must load.
    """

    name: str
    run: Callable[["Sandbox"], object]
    error: Type[BaseException]
    words: Tuple[str, ...]
    unchanged: Tuple[str, ...] = (".",)
    absent: Tuple[str, ...] = ()
    intact: Tuple[str, ...] = ()


CASES: List[Case] = []


def case(
    name: str,
    error: Type[BaseException],
    *words: str,
    unchanged: Sequence[str] = (".",),
    absent: Sequence[str] = (),
    intact: Sequence[str] = (),
):
    def register(run: Callable[["Sandbox"], object]):
        CASES.append(
            Case(name, run, error, tuple(words), tuple(unchanged), tuple(absent), tuple(intact))
        )
        return run

    return register


def _switched(run: Callable[[], object]) -> Callable[[], object]:
    """`run` with every guard on for every archive (`elmoc_allennlp_hardening`): a file that
    is no tar archive is not known to be the plugin's, so allennlp's `load_archive` reports it
    as stock allennlp does unless the user asks for the guards everywhere."""

    def switched():
        from elmoc_allennlp.hardening import hardened_everywhere

        with hardened_everywhere():
            return run()

    return switched


# ---------------------------------------------------------------------- the sandbox


@dataclass
class Sandbox:
    root: Path
    crafted: Dict[str, Path]
    archive: Path
    fasttext: Path
    outside: Path
    paths: Dict[str, str] = field(default_factory=dict)

    def copy(self, source: Path, name: str) -> Path:
        target = self.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
        self.paths[name] = str(target)
        return target

    def crafted_copy(self, kind: str) -> Path:
        """The crafted archive `kind`, copied into the sandbox as `<kind>.tar.gz`."""
        path = self.copy(self.crafted[kind], f"{kind}.tar.gz")
        self.paths["archive"] = str(path)
        return path

    def snapshot(self, relative: str) -> Dict[str, Tuple]:
        top = self.root / relative
        if not top.exists() and not top.is_symlink():
            return {}
        entries = [top] if not top.is_dir() else sorted(top.rglob("*"))
        # `tempfile`'s folder has its own invariant (see `test_bad_input`).
        entries = [path for path in entries if (self.root / "tmp") not in path.parents]
        state = {}
        for path in entries:
            key = str(path.relative_to(self.root))
            if path.is_symlink():
                state[key] = ("link", os.readlink(path))
            elif path.is_file():
                state[key] = ("file", hashlib.sha1(path.read_bytes()).hexdigest())
            else:
                state[key] = ("dir",)
        return state


@pytest.fixture
def sandbox(tmp_path, monkeypatch, crafted, elmoc_archive, outside, tiny_fasttext_path):
    """A folder per case, with `tempfile`'s folder inside it, and the case's inputs."""
    root = tmp_path / "sandbox"
    (root / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(root / "tmp"))
    monkeypatch.setenv("TMPDIR", str(root / "tmp"))
    box = Sandbox(root, crafted, Path(elmoc_archive), Path(tiny_fasttext_path), outside)
    box.paths["fasttext"] = str(tiny_fasttext_path)
    yield box
    clear_fasttext_cache()
    remove_extracted_archives()


def _escaped_files(base: Path) -> List[Path]:
    return [path for path in base.rglob(ESCAPE_NAME)]


@pytest.mark.parametrize("bad", CASES, ids=lambda bad: bad.name)
def test_bad_input(bad: Case, sandbox: Sandbox, tmp_path_factory):
    # The case sets its inputs up and returns the bad call; the snapshot is taken in between.
    prepared = bad.run(sandbox)
    before = {relative: sandbox.snapshot(relative) for relative in bad.unchanged}
    with pytest.raises(bad.error) as raised:
        prepared()
    message = str(raised.value)
    for word in bad.words:
        expected = word.format(**sandbox.paths)
        assert expected in message, f"{expected!r} not in {message!r}"
    for relative in bad.unchanged:
        assert sandbox.snapshot(relative) == before[relative], f"{relative} changed"
    for relative in bad.absent:
        assert not (sandbox.root / relative).exists(), f"{relative} was written"
    for relative in bad.intact:
        assert torch.load(sandbox.root / relative, map_location="cpu"), relative
    assert list(sandbox.outside.iterdir()) == []
    assert _escaped_files(tmp_path_factory.getbasetemp()) == []
    # Only the extractions `read_archive` keeps for the process (of archives that loaded) stay,
    # until exit.
    kept = {opened.directory for opened in _OPENED.values()}
    assert set((sandbox.root / "tmp").iterdir()) <= kept, "a temporary folder was left behind"
    remove_extracted_archives()
    assert list((sandbox.root / "tmp").iterdir()) == []


def test_the_table_has_at_least_80_cases():
    assert len(CASES) >= 80, len(CASES)
    assert len({bad.name for bad in CASES}) == len(CASES)


# ---------------------------------------------------------------------- crafted archives
# Every crafted archive, through the loaders that open archives: allennlp's own `load_archive`
# (`allennlp evaluate` / `predict`, `Model.from_archive`), `ElmocEmbedder` (and so the token
# embedder and `elmoc-embed`), `allennlp elmoc-merge-bilm`'s extraction, and the extraction
# itself.

UNSAFE_KINDS = {
    "absolute-name": "has an absolute name",
    "dotdot-name": "has a '..' component",
    "dotdot-name-first": "has a '..' component",
    "dotdot-inside-name": "has a '..' component",
    # `allennlp train` writes no links: every link is refused, wherever it points.
    "symlink-to-absolute-folder": "is a symbolic link",
    "symlink-then-file-through-it": "is a symbolic link",
    "symlink-climbing-out": "is a symbolic link",
    "symlink-chain-out": "is a symbolic link",
    "file-through-inner-symlink": "is a symbolic link",
    "symlink-replacing-config": "is a symbolic link",
    "hardlink-to-absolute": "is a hard link",
    "hardlink-climbing-out": "is a hard link",
    "hardlink-to-symlink": "is a symbolic link",
    "character-device": "is a character device",
    "block-device": "is a block device",
    "fifo": "is a FIFO",
    "duplicate-config": "appears twice",
    "config-is-a-folder": "is a folder, where a regular file is expected",
    "file-inside-config": "is inside 'config.json', which is a file",
    "inner-link-to-a-sibling": "is a symbolic link",
    "inner-hard-link": "is a hard link",
    "sparse-config": "is a sparse file",
}


def _load_archive_call(sandbox, kind):
    from allennlp.models.archival import load_archive

    path = sandbox.crafted_copy(kind)
    return lambda: load_archive(str(path))


def _embedder_call(sandbox, kind):
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    path = sandbox.crafted_copy(kind)
    return lambda: ElmocEmbedder(str(path))


def _extract_call(sandbox, kind):
    path = sandbox.crafted_copy(kind)
    return lambda: extract_archive(path, sandbox.root / "extracted")


for _kind, _reason in UNSAFE_KINDS.items():
    for _loader, _call in (
        ("load_archive", _load_archive_call),
        ("ElmocEmbedder", _embedder_call),
        ("extract_archive", _extract_call),
    ):
        case(
            f"archive-{_kind}-{_loader}",
            UnsafeArchiveError,
            "Refusing to extract model archive {archive}",
            _reason,
            "Nothing was extracted",
            absent=("extracted",),
        )(lambda sandbox, kind=_kind, call=_call: call(sandbox, kind))


@case(
    "archive-crafted-elmoc-embed-cli",
    UnsafeArchiveError,
    "{archive}",
    "'..' component",
    absent=("out.hdf5",),
)
def _crafted_elmoc_embed(sandbox):
    from allennlp.commands import main

    path = sandbox.crafted_copy("dotdot-name")
    sentences = sandbox.root / "in.txt"
    sentences.write_text("the bank raised its rate\n")
    argv = [
        "allennlp",
        "elmoc-embed",
        str(path),
        str(sentences),
        str(sandbox.root / "out.hdf5"),
        "--top",
    ]

    def run():
        previous = sys.argv
        sys.argv = argv
        try:
            main(prog="allennlp")
        finally:
            sys.argv = previous

    return run


@case(
    "archive-crafted-downstream-config",
    UnsafeArchiveError,
    "{archive}",
    "absolute name",
    unchanged=("absolute-name.tar.gz",),
    absent=("run/model.tar.gz",),
)
def _crafted_downstream_config(sandbox):
    from allennlp.commands.train import train_model_from_file

    path = sandbox.crafted_copy("absolute-name")
    environment = _downstream_environment(sandbox, path)

    def run():
        with _environment(environment):
            train_model_from_file(
                str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"),
                str(sandbox.root / "run"),
                overrides=json.dumps({"trainer.num_epochs": 1}),
            )

    return run


def _downstream_environment(sandbox, archive: Path) -> Dict[str, str]:
    variables = {
        "ELMOC_ARCHIVE": str(archive),
        "ELMOC_DIM": "12",
        "ELMOC_FASTTEXT": str(sandbox.fasttext),
        "ELMOC_FASTTEXT_DIM": "16",
    }
    for split in ("TRAIN", "VALIDATION", "TEST"):
        variables[f"NER_{split}_DATA_PATH"] = str(DOWNSTREAM_FIXTURES / "conll2003.txt")
    return variables


class _environment:
    def __init__(self, variables: Dict[str, str]):
        self.variables, self.previous = variables, {}

    def __enter__(self):
        for name, value in self.variables.items():
            self.previous[name] = os.environ.get(name)
            os.environ[name] = value

    def __exit__(self, *exc):
        for name, value in self.previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@case(
    "archive-config-runs-subprocess-load_archive",
    ConfigurationError,
    "{archive}",
    "model.type",
    "subprocess.Popen",
    "never imported",
)
def _config_type_load_archive(sandbox):
    from allennlp.models.archival import load_archive

    path = _popen_archive(sandbox)
    return lambda: load_archive(str(path))


@case(
    "archive-config-runs-subprocess-ElmocEmbedder",
    ConfigurationError,
    "{archive}",
    "model.type",
    "subprocess.Popen",
    "never imported",
)
def _config_type_embedder(sandbox):
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    path = _popen_archive(sandbox)
    return lambda: ElmocEmbedder(str(path))


def _popen_archive(sandbox) -> Path:
    """An archive whose config's model is `subprocess.Popen` writing a file, if it ever runs."""
    from allennlp.models.archival import CONFIG_NAME

    with tarfile.open(sandbox.archive) as tar:
        config = json.load(tar.extractfile(CONFIG_NAME))
    marker = sandbox.root / ESCAPE_NAME
    config["model"] = {"type": "subprocess.Popen", "args": f"touch {marker}", "shell": True}
    path = write_archive(sandbox.archive, sandbox.root / "popen.tar.gz", [], config=config)
    sandbox.paths["archive"] = str(path)
    return path


def _archive_config(sandbox) -> Dict:
    with tarfile.open(sandbox.archive) as tar:
        return json.load(tar.extractfile("config.json"))


def _config_archive_call(sandbox, config, loader: str = "load_archive", extra=(), **changes):
    """`loader` on a copy of the tiny archive whose `config.json` is `config` (dict or bytes)."""
    path = write_archive(
        sandbox.archive, sandbox.root / "crafted.tar.gz", list(extra), config=config, **changes
    )
    sandbox.paths["archive"] = str(path)
    if loader == "ElmocEmbedder":
        from elmoc_allennlp.downstream.embedder import ElmocEmbedder

        return lambda: ElmocEmbedder(str(path))
    from allennlp.models.archival import load_archive

    return lambda: load_archive(str(path))


def _with_model_type(sandbox, model_type: str) -> Dict:
    config = _archive_config(sandbox)
    config["model"]["type"] = model_type
    return config


# Configs inside archives: strict JSON, and dotted types only if registered or already imported.
_JSONNET_CONFIG = b'local secret = std.extVar("HOME"); {model: {type: "elmoc_bilm", x: secret}}'
_ARCHIVE_CONFIG_CASES = {
    # name: (config, words)
    "jsonnet": (lambda sandbox: _JSONNET_CONFIG, ("config.json", "is not JSON", "jsonnet")),
    "importstr": (lambda sandbox: b'{"model": importstr "/etc/passwd"}', ("is not JSON",)),
    "not-utf8": (lambda sandbox: b'{"model": "\xff"}', ("is not JSON",)),
    "deeply-nested": (lambda sandbox: b"[" * 200_000 + b"]" * 200_000, ("is not JSON",)),
    "a-list": (lambda sandbox: b"[1, 2]", ("not a JSON object",)),
    "type-never-imported": (
        lambda sandbox: _with_model_type(sandbox, "this.Zen"),
        ("model.type", "'this.Zen'", "never imported"),
    ),
    "type-in-a-module-of-the-archive": (
        lambda sandbox: _with_model_type(sandbox, "elmoc_planted.Model"),
        ("model.type", "'elmoc_planted.Model'", "never imported"),
    ),
    "type-of-an-imported-module-not-a-component": (
        lambda sandbox: _with_model_type(sandbox, "os.system"),
        ("model.type", "'os.system'"),
    ),
}
for _name, (_config, _words) in _ARCHIVE_CONFIG_CASES.items():
    for _loader in ("load_archive", "ElmocEmbedder"):
        case(f"archive-config-{_name}-{_loader}", ConfigurationError, "{archive}", *_words)(
            lambda sandbox, config=_config, loader=_loader: _config_archive_call(
                sandbox, config(sandbox), loader
            )
        )


def _vocabulary_members(sandbox) -> Tuple[str, ...]:
    with tarfile.open(sandbox.archive) as tar:
        return tuple(name for name in tar.getnames() if name.split("/")[0] == "vocabulary")


for _loader in ("load_archive", "ElmocEmbedder"):
    case(
        f"archive-without-config-{_loader}", ConfigurationError, "{archive}", "has no config.json"
    )(
        lambda sandbox, loader=_loader: _config_archive_call(
            sandbox, None, loader, drop=("config.json",)
        )
    )
    case(
        f"archive-without-weights-{_loader}", ConfigurationError, "{archive}", "has no weights.th"
    )(
        lambda sandbox, loader=_loader: _config_archive_call(
            sandbox, None, loader, drop=("weights.th",)
        )
    )
    case(
        f"archive-without-vocabulary-{_loader}",
        ConfigurationError,
        "{archive}",
        "has no vocabulary/",
    )(
        lambda sandbox, loader=_loader: _config_archive_call(
            sandbox, None, loader, drop=_vocabulary_members(sandbox)
        )
    )
    case(
        f"archive-config-without-model-{_loader}",
        ConfigurationError,
        "{archive}",
        "config.json",
        "has no model section",
    )(
        lambda sandbox, loader=_loader: _config_archive_call(
            sandbox, {"dataset_reader": {"type": "elmoc_lm_corpus"}}, loader
        )
    )


@case("archive-meta-not-json", ConfigurationError, "{archive}", "meta.json", "is not JSON")
def _bad_meta(sandbox):
    from tests.bad_input.conftest import _file

    return _config_archive_call(
        sandbox, None, drop=("meta.json",), extra=[_file("meta.json", b"{not json")]
    )


def _limited(variable: str, value: str, loader: str = "load_archive"):
    def prepare(sandbox):
        call = _config_archive_call(sandbox, None, loader)

        def run():
            with _environment({variable: value}):
                call()

        return run

    return prepare


for _loader in ("load_archive", "ElmocEmbedder"):
    case(
        f"archive-too-many-members-{_loader}",
        UnsafeArchiveError,
        "{archive}",
        "ELMOC_ARCHIVE_MAX_MEMBERS",
    )(_limited("ELMOC_ARCHIVE_MAX_MEMBERS", "2", _loader))
    case(
        f"archive-too-many-bytes-{_loader}",
        UnsafeArchiveError,
        "{archive}",
        "ELMOC_ARCHIVE_MAX_BYTES",
    )(_limited("ELMOC_ARCHIVE_MAX_BYTES", "2000", _loader))
    case(
        f"archive-json-member-too-large-{_loader}",
        UnsafeArchiveError,
        "{archive}",
        "'config.json'",
        "ELMOC_ARCHIVE_MAX_JSON_BYTES",
    )(_limited("ELMOC_ARCHIVE_MAX_JSON_BYTES", "100", _loader))


@case(
    "archive-decompression-bomb",
    UnsafeArchiveError,
    "{archive}",
    "'weights.th'",
    "ELMOC_ARCHIVE_MAX_RATIO",
    absent=("extracted",),
)
def _bomb(sandbox):
    """A few KB declaring a 3 GiB member: refused from its header, before a byte is written."""
    import gzip

    member = tarfile.TarInfo("weights.th")
    member.size = 3 << 30
    path = sandbox.root / "bomb.tar.gz"
    path.write_bytes(gzip.compress(member.tobuf() + bytes(1 << 16)))
    sandbox.paths["archive"] = str(path)
    return lambda: extract_archive(path, sandbox.root / "extracted")


@case(
    "archive-is-a-zip",
    CorruptArchiveError,
    "{archive}",
    "is a zip archive",
    "holding 'config.json'",
)
def _zip_archive(sandbox):
    import zipfile

    from allennlp.models.archival import load_archive

    path = sandbox.root / "model.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", "{}")
    sandbox.paths["archive"] = str(path)
    return _switched(lambda: load_archive(str(path)))


@case(
    "weights-legacy-declaring-32-gib-posing-as-a-zip",
    UnsafeArchiveError,
    "{archive}",
    "'weights.th'",
    "a zip archive from its first byte",
)
def _legacy_weights(sandbox):
    """A few-KB `weights.th` in torch's legacy format declaring a 2^33-value storage, a real weights
    zip appended (which `zipfile` reads): refused before torch allocates, naming the archive."""
    from tests.bad_input.conftest import _file
    from tests.common.archives.test_weights_header import _legacy_with_a_zip_appended

    with tarfile.open(sandbox.archive) as tar:
        weights = _legacy_with_a_zip_appended(tar.extractfile("weights.th").read())
    return _config_archive_call(
        sandbox, None, drop=("weights.th",), extra=[_file("weights.th", weights)]
    )


def _elmoc_zip(sandbox, config: Optional[Dict] = None) -> Path:
    """The tiny biLM archive's members in a zip (config.json replaced by `config`)."""
    import zipfile

    path = sandbox.root / "model.zip"
    with tarfile.open(sandbox.archive) as tar, zipfile.ZipFile(path, "w") as archive:
        for member in tar:
            if member.isfile():
                data = tar.extractfile(member).read()
                if member.name == "config.json" and config is not None:
                    data = json.dumps(config).encode("utf-8")
                archive.writestr(member.name, data)
    sandbox.paths["archive"] = str(path)
    return path


def _zip_call(sandbox, loader: str):
    path = _elmoc_zip(sandbox)
    if loader == "ElmocEmbedder":
        from elmoc_allennlp.downstream.embedder import ElmocEmbedder

        return lambda: ElmocEmbedder(str(path))
    if loader == "BilmArchive":
        from elmoc_allennlp.downstream.archive import BilmArchive

        return lambda: BilmArchive.open(str(path))
    if loader == "elmoc-embed":
        sandbox.archive = path
        return _embed_call(sandbox)
    if loader == "allennlp-evaluate":
        lines = sandbox.root / "valid.txt"
        lines.write_text("the bank raised its rate\n")
        return _allennlp_main(["evaluate", str(path), str(lines)])
    from allennlp.models.archival import load_archive

    return lambda: load_archive(str(path))


# A zip holding an ELMo-C model is the plugin's, by default (allennlp reads no zip: stock allennlp
# would raise tarfile's "not a gzip file" and leave its temporary folder).
for _loader in ("load_archive", "allennlp-evaluate", "ElmocEmbedder", "BilmArchive", "elmoc-embed"):
    case(
        f"elmoc-model-in-a-zip-{_loader}",
        CorruptArchiveError,
        "{archive}",
        "is a zip archive",
        "holding 'config.json'",
        "nothing was extracted",
    )(lambda sandbox, loader=_loader: _zip_call(sandbox, loader))


def test_a_stock_model_in_a_zip_is_left_to_stock_allennlp(elmoc_archive, tmp_path, monkeypatch):
    """What docs/trust_and_safety.md says a zip of a stock model gets (without the switch):
    tarfile's `ReadError`, and the temporary folder allennlp's `load_archive` made is left."""
    from allennlp.models.archival import load_archive

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    config = {
        "model": {"type": "basic_classifier"},
        "dataset_reader": {"type": "text_classification_json"},
    }
    path = _elmoc_zip(Sandbox(tmp_path, {}, elmoc_archive, Path(), Path()), config)
    with pytest.raises(tarfile.ReadError, match="^not a gzip file$"):
        load_archive(str(path))
    (left,) = (tmp_path / "tmp").iterdir()
    assert left.is_dir() and list(left.iterdir()) == []


@case("archive-is-a-fasttext-bin", CorruptArchiveError, "{archive}", "not a tar archive")
def _bin_as_archive(sandbox):
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    path = sandbox.copy(sandbox.fasttext, "vectors.bin")
    sandbox.paths["archive"] = str(path)
    return lambda: ElmocEmbedder(str(path))


@case("archive-is-a-fifo", ConfigurationError, "{archive}", "not a regular file")
def _fifo_archive(sandbox):
    from allennlp.models.archival import load_archive

    path = sandbox.root / "model.tar.gz"
    os.mkfifo(path)
    sandbox.paths["archive"] = str(path)
    return _switched(lambda: load_archive(str(path)))


@case(
    "serialization-dir-config-type-never-imported",
    ConfigurationError,
    "{folder}",
    "model.type",
    "'this.Zen'",
)
def _folder_type(sandbox):
    """A biLM given as a folder (a serialization directory, or a carried `elmoc_bilm/<key>/`)."""
    from elmoc_allennlp.downstream.archive import BilmArchive

    folder = sandbox.root / "run"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_with_model_type(sandbox, "this.Zen")))
    sandbox.paths["folder"] = str(folder)
    return lambda: BilmArchive.open(str(folder))


# Slot swaps: every section loading builds (and each nested slot whose base class its constructor
# names) takes a type of its own kind only, by default: a reader that is the biLM would be built
# (the swap of issue #48). Refused from the config, before anything is built, by every loader.
_BILM_CLASS = "elmoc_allennlp.models.bidirectional_language_model.BidirectionalLanguageModel"
_READER_CLASS = "elmoc_allennlp.data.dataset_readers.lm_corpus_reader.LanguageModelCorpusReader"


def _model_as_reader(config: Dict) -> Dict:
    """The biLM's own model section (with the vocabulary a model needs) as a reader."""
    reader = json.loads(json.dumps(config["model"]))
    reader.update(type=_BILM_CLASS, vocab={"type": "empty"})
    return reader


def _swap(section: str, value: Callable[[Dict], object]) -> Callable[[Dict], None]:
    def edit(config: Dict) -> None:
        *parents, last = section.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        node[last] = value(config)

    return edit


_SLOT_SWAPS = {
    # name: (edit of the config, key, words)
    "model-is-a-reader": (
        _swap("model.type", lambda config: _READER_CLASS),
        "model.type",
        "not a Model",
    ),
    "reader-is-the-bilm": (
        _swap("dataset_reader", _model_as_reader),
        "dataset_reader.type",
        "not a DatasetReader",
    ),
    "validation-reader-is-the-bilm": (
        _swap("validation_dataset_reader", _model_as_reader),
        "validation_dataset_reader.type",
        "not a DatasetReader",
    ),
    "vocabulary-is-the-bilm": (
        _swap("vocabulary.type", lambda config: _BILM_CLASS),
        "vocabulary.type",
        "not a Vocabulary",
    ),
    "contextualizer-is-a-reader": (
        _swap("model.contextualizer.type", lambda config: _READER_CLASS),
        "model.contextualizer.type",
        "not a Seq2SeqEncoder",
    ),
    "token-embedder-named-as-a-reader": (
        _swap(
            "model.text_field_embedder.token_embedders.fasttext.type",
            lambda config: "elmoc_lm_corpus",
        ),
        "model.text_field_embedder.token_embedders.fasttext.type",
        "not a registered TokenEmbedder",
    ),
    "token-indexer-is-the-bilm": (
        _swap("dataset_reader.token_indexers.fasttext.type", lambda config: _BILM_CLASS),
        "dataset_reader.token_indexers.fasttext.type",
        "not a TokenIndexer",
    ),
    # `allennlp evaluate` builds the data loader and the evaluator from the archive's config.
    "data-loader-is-the-bilm": (
        _swap("data_loader.type", lambda config: _BILM_CLASS),
        "data_loader.type",
        "not a DataLoader",
    ),
    "batch-sampler-is-a-reader": (
        _swap("data_loader.batch_sampler.type", lambda config: _READER_CLASS),
        "data_loader.batch_sampler.type",
        "not a BatchSampler",
    ),
    "evaluator-is-a-reader": (
        _swap("evaluation", lambda config: {"type": _READER_CLASS}),
        "evaluation.type",
        "not an Evaluator",
    ),
}


def _swapped_archive(sandbox, edit: Callable[[Dict], None]) -> Path:
    config = _archive_config(sandbox)
    edit(config)
    path = write_archive(sandbox.archive, sandbox.root / "swapped.tar.gz", [], config=config)
    sandbox.paths["archive"] = str(path)
    return path


def _swapped_call(sandbox, edit: Callable[[Dict], None], loader: str):
    path = _swapped_archive(sandbox, edit)
    if loader == "ElmocEmbedder":
        from elmoc_allennlp.downstream.embedder import ElmocEmbedder

        return lambda: ElmocEmbedder(str(path))
    if loader == "Predictor.from_path":
        from allennlp.predictors import Predictor

        return lambda: Predictor.from_path(str(path))
    if loader == "allennlp-evaluate":
        lines = sandbox.root / "valid.txt"
        lines.write_text("the bank raised its rate\n")
        return _allennlp_main(["evaluate", str(path), str(lines)])
    if loader == "allennlp-predict":
        lines = sandbox.root / "input.jsonl"
        lines.write_text('{"sentence": "the bank raised its rate"}\n')
        return _allennlp_main(["predict", str(path), str(lines), "--silent"])
    from allennlp.models.archival import load_archive

    return lambda: load_archive(str(path))


def _allennlp_main(arguments: List[str]) -> Callable[[], None]:
    """`allennlp ARGUMENTS`, in this process."""
    from allennlp.commands import main

    def run():
        previous = sys.argv
        sys.argv = ["allennlp"] + arguments
        try:
            main(prog="allennlp")
        finally:
            sys.argv = previous

    return run


for _name, (_edit, _key, _words) in _SLOT_SWAPS.items():
    for _loader in (
        "load_archive",
        "Predictor.from_path",
        "allennlp-predict",
        "allennlp-evaluate",
        "ElmocEmbedder",
    ):
        case(
            f"slot-swap-{_name}-{_loader}",
            ConfigurationError,
            "{archive}",
            _key,
            _words,
            "nothing was built",
        )(lambda sandbox, edit=_edit, loader=_loader: _swapped_call(sandbox, edit, loader))


def _huge_reader(config: Dict) -> None:
    config["dataset_reader"] = _model_as_reader(config)
    config["dataset_reader"]["contextualizer"]["num_layers"] = 10**9


def _sized_reader(config: Dict) -> None:
    """A reader of its own kind whose config implies a huge layer (readers hold no weights, but what
    their sizes imply is built all the same)."""
    config["dataset_reader"]["encoder"] = {
        "input_dim": 10**6,
        "hidden_dim": 10**6,
        "num_layers": 10**9,
    }


class _TookTooLong(BaseException):
    """Not a `ConfigurationError`: a case that outlives its deadline fails."""


def _within(seconds: float, call: Callable[[], object]) -> Callable[[], object]:
    """`call`, stopped (and failing its case) after `seconds`: a billion layers are built for hours."""
    import signal

    def run():
        def expire(*_):
            raise _TookTooLong(f"not refused within {seconds} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return run


for _loader in ("load_archive", "allennlp-predict", "ElmocEmbedder"):
    case(
        f"billion-layer-reader-{_loader}",
        ConfigurationError,
        "{archive}",
        "dataset_reader.type",
        "not a DatasetReader",
    )(lambda sandbox, loader=_loader: _within(10, _swapped_call(sandbox, _huge_reader, loader)))
    case(
        f"reader-past-max-parameters-{_loader}",
        ConfigurationError,
        "{archive}",
        "dataset_reader.encoder.num_layers",
        "ELMOC_ARCHIVE_MAX_PARAMETERS",
        "nothing was built",
    )(lambda sandbox, loader=_loader: _swapped_call(sandbox, _sized_reader, loader))


# Truncated archives: the real archive cut at random places, and other damaged files.
_ARCHIVE_CUTS = [0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99]


def _truncated_call(sandbox, fraction: float, loader: str):
    data = sandbox.archive.read_bytes()
    # Seeded: the same cuts on every machine; never the whole file.
    cut = int(len(data) * fraction) + random.Random(str(fraction)).randrange(0, 9)
    cut = min(cut, len(data) - 1)
    path = sandbox.root / "truncated.tar.gz"
    path.write_bytes(data[:cut])
    sandbox.paths["archive"] = str(path)
    if loader == "ElmocEmbedder":
        from elmoc_allennlp.downstream.embedder import ElmocEmbedder

        return lambda: ElmocEmbedder(str(path))
    from allennlp.models.archival import load_archive

    if fraction < 0.05:  # cut before its config.json: nothing says it is an ELMo-C archive
        return _switched(lambda: load_archive(str(path)))
    return lambda: load_archive(str(path))


for _fraction in _ARCHIVE_CUTS:
    for _loader in ("load_archive", "ElmocEmbedder"):
        case(
            f"archive-truncated-at-{_fraction:.0%}-{_loader}",
            CorruptArchiveError,
            "{archive} is not a readable model archive",
            "download or copy it again",
        )(
            lambda sandbox, fraction=_fraction, loader=_loader: _truncated_call(
                sandbox, fraction, loader
            )
        )


def _damaged_archive(data: Callable[[bytes], bytes], switched: bool = False):
    """`switched`: nothing in the file says it is an ELMo-C archive (see `_switched`)."""

    def prepare(sandbox):
        from allennlp.models.archival import load_archive

        path = sandbox.root / "damaged.tar.gz"
        path.write_bytes(data(sandbox.archive.read_bytes()))
        sandbox.paths["archive"] = str(path)
        call = lambda: load_archive(str(path))  # noqa: E731
        return _switched(call) if switched else call

    return prepare


case("archive-empty-file", CorruptArchiveError, "{archive}", "the file is empty")(
    _damaged_archive(lambda data: b"", switched=True)
)
case("archive-random-bytes", CorruptArchiveError, "{archive}", "not a tar archive")(
    _damaged_archive(
        lambda data: bytes(random.Random(3).getrandbits(8) for _ in range(5000)), switched=True
    )
)
case("archive-gzip-trailer-cut", CorruptArchiveError, "{archive}", "truncated or corrupt")(
    _damaged_archive(lambda data: data[:-4])
)
case("archive-flipped-byte-in-weights", CorruptArchiveError, "{archive}")(
    _damaged_archive(
        lambda data: data[: len(data) // 2]
        + bytes([data[len(data) // 2] ^ 0xFF])
        + data[len(data) // 2 + 1 :]
    )
)
case("archive-text-file", CorruptArchiveError, "{archive}", "not a tar archive")(
    _damaged_archive(lambda data: b'{"model": "not an archive"}\n', switched=True)
)


@case("archive-truncated-merge-bilm", CorruptArchiveError, "{archive}", absent=("merged.tar.gz",))
def _truncated_merge(sandbox):
    from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives

    data = sandbox.archive.read_bytes()
    path = sandbox.root / "backward.tar.gz"
    path.write_bytes(data[: len(data) // 2])
    sandbox.paths["archive"] = str(path)
    return lambda: merge_bilm_archives(
        str(sandbox.archive), str(path), str(sandbox.root / "merged.tar.gz"), verify=False
    )


# ---------------------------------------------------------------------- fastText vectors


def _tiny_vectors(path: Path, **changes) -> Path:
    words = ["</s>", "the", "bank", "rate", "<S>", "</S>"]
    matrix = np.random.default_rng(0).standard_normal((len(words) + 30, 16)).astype(np.float32)
    for row, value in changes.get("values", {}).items():
        matrix[row, 3] = value
    return write_fasttext_bin(path, words, matrix, minn=2, maxn=3, bucket=30)


def _vectors_lookup(sandbox, values, word):
    path = _tiny_vectors(sandbox.root / "vectors.bin", values=values)
    sandbox.paths["bin"] = str(path)
    return lambda: FastTextVectors(path).word_vector(word)


case(
    "fasttext-nan-in-a-word-vector",
    FastTextFormatError,
    "{bin}",
    "row 2 ",
    "the word 'bank'",
    "nan",
)(lambda sandbox: _vectors_lookup(sandbox, {2: float("nan")}, "bank"))
case("fasttext-inf-in-a-word-vector", FastTextFormatError, "{bin}", "the word 'rate'", "inf")(
    lambda sandbox: _vectors_lookup(sandbox, {3: float("inf")}, "rate")
)
case("fasttext-huge-value", FastTextFormatError, "{bin}", "3e+38", "magnitude")(
    lambda sandbox: _vectors_lookup(sandbox, {1: 3e38}, "the")
)


@case("fasttext-nan-in-an-ngram-bucket", FastTextFormatError, "{bin}", "character n-gram bucket")
def _nan_bucket(sandbox):
    buckets = {row: float("nan") for row in range(6, 36)}  # every n-gram row
    path = _tiny_vectors(sandbox.root / "vectors.bin", values=buckets)
    sandbox.paths["bin"] = str(path)
    return lambda: FastTextVectors(path).word_vector("unseen")


@case("fasttext-nan-through-the-token-embedder", FastTextFormatError, "{bin}", "the word 'the'")
def _nan_embedder(sandbox):
    from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import (
        FastTextSubwordIndexer,
    )
    from elmoc_allennlp.modules.token_embedders.fasttext_token_embedder import (
        FastTextTokenEmbedder,
    )

    path = _tiny_vectors(sandbox.root / "vectors.bin", values={1: float("-inf")})
    sandbox.paths["bin"] = str(path)
    indexer = FastTextSubwordIndexer(str(path))
    ids = torch.tensor([[indexer.token_ids("the")]])
    return lambda: FastTextTokenEmbedder(str(path))(ids)


def _patched_bin(sandbox, offset: int, value: int) -> Path:
    data = bytearray(_tiny_vectors(sandbox.root / "source.bin").read_bytes())
    struct.pack_into("<i", data, offset, value)
    path = sandbox.root / "vectors.bin"
    path.write_bytes(bytes(data))
    (sandbox.root / "source.bin").unlink()
    sandbox.paths["bin"] = str(path)
    return path


case("fasttext-version-13", FastTextFormatError, "{bin}", "unsupported fastText format version 13")(
    lambda sandbox: (lambda path=_patched_bin(sandbox, 4, 13): lambda: FastTextVectors(path))()
)
case("fasttext-version-10", FastTextFormatError, "{bin}", "version 10", "readable: 11, 12")(
    lambda sandbox: (lambda path=_patched_bin(sandbox, 4, 10): lambda: FastTextVectors(path))()
)


@case("fasttext-version-11-without-pruneidx-field", FastTextFormatError, "{bin}", "pruneidx_size")
def _version_11_old_layout(sandbox):
    # A version-11 dictionary without the 8-byte pruneidx_size field (a layout older than what
    # fastText 0.9 reads): it cannot be read correctly, so it is refused, not misread.
    data = bytearray(_tiny_vectors(sandbox.root / "source.bin").read_bytes())
    struct.pack_into("<i", data, 4, 11)
    pruneidx = 8 + 12 * 4 + 8 + 4 * 3 + 8
    del data[pruneidx : pruneidx + 8]
    path = sandbox.root / "vectors.bin"
    path.write_bytes(bytes(data))
    sandbox.paths["bin"] = str(path)
    return lambda: FastTextVectors(path)


@case(
    "fasttext-replaced-while-in-use", FastTextFormatError, "{bin}", "changed on disk", unchanged=()
)
def _replaced_bin(sandbox):
    from elmoc_allennlp.modules.token_embedders.fasttext_token_embedder import (
        FastTextTokenEmbedder,
    )

    path = _tiny_vectors(sandbox.root / "vectors.bin")
    sandbox.paths["bin"] = str(path)
    embedder = FastTextTokenEmbedder(str(path))
    ids = torch.tensor([[[1, 2]]])
    embedder(ids)

    def run():
        replacement = sandbox.root / "new.bin"
        _tiny_vectors(replacement, values={0: 0.5})
        os.replace(replacement, path)  # what `cp new.bin vectors.bin`-by-rename does
        embedder(ids)

    return run


@case(
    "fasttext-truncated-while-in-use", FastTextFormatError, "{bin}", "changed on disk", unchanged=()
)
def _truncated_bin(sandbox):
    from elmoc_allennlp.modules.token_embedders.fasttext_token_embedder import (
        FastTextTokenEmbedder,
    )

    path = _tiny_vectors(sandbox.root / "vectors.bin")
    sandbox.paths["bin"] = str(path)
    embedder = FastTextTokenEmbedder(str(path))
    ids = torch.tensor([[[1, 2]]])
    embedder(ids)

    def run():
        # Rewritten in place: reading the cut-off pages would be a bus error (SIGBUS).
        with open(path, "r+b") as handle:
            handle.truncate(100)
        embedder(ids)

    return run


@case(
    "fasttext-deleted-while-in-use",
    FastTextFormatError,
    "{bin}",
    "cannot be found any more",
    unchanged=(),
)
def _deleted_bin(sandbox):
    path = _tiny_vectors(sandbox.root / "vectors.bin")
    sandbox.paths["bin"] = str(path)
    vectors = FastTextVectors(path)

    def run():
        path.unlink()
        vectors.check_unchanged()

    return run


@case(
    "fasttext-replaced-during-training",
    FastTextFormatError,
    "{bin}",
    "changed on disk",
    unchanged=(),
    absent=("run/model.tar.gz", "run/model_state_e2_b0.th"),
    intact=("run/model_state_e1_b0.th", "run/training_state_e1_b0.th"),
)
def _replaced_during_training(sandbox):
    """The .bin of a run replaced after its first epoch: the run stops at the next batch,
    naming the file, and its last checkpoint stays as it was."""
    from allennlp.training.callbacks import TrainerCallback

    path = sandbox.copy(sandbox.fasttext, "vectors.bin")
    sandbox.paths["bin"] = str(path)
    replacement = sandbox.root / "replacement.bin"
    _tiny_vectors(replacement)

    class ReplaceVectorsAfterFirstEpoch(TrainerCallback):
        def on_epoch(self, trainer, metrics, epoch, is_primary=True, **kwargs) -> None:
            if epoch == 0:
                os.replace(replacement, path)

    key = "fasttext.vectors_path"
    train = _train_tiny(
        sandbox,
        {
            "trainer.num_epochs": 2,
            f"dataset_reader.token_indexers.{key}": str(path),
            f"model.text_field_embedder.token_embedders.{key}": str(path),
        },
    )
    original_init = None

    def run():
        nonlocal original_init
        from elmoc_allennlp.training.fast_recovery_trainer import FastRecoveryTrainer

        original_init = FastRecoveryTrainer.__init__

        def with_callback(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            self._callbacks.append(ReplaceVectorsAfterFirstEpoch(str(sandbox.root / "run")))

        FastRecoveryTrainer.__init__ = with_callback
        try:
            train()
        finally:
            FastRecoveryTrainer.__init__ = original_init

    return run


# ---------------------------------------------------------------------- vectors fingerprint


def _other_vectors(sandbox, name: str = "other.bin") -> Path:
    """Another model with the tiny model's dimension (16): its vectors are meaningless here."""
    words = ["</s>", "the", "a", "bank"]
    matrix = np.random.default_rng(5).standard_normal((len(words) + 50, 16)).astype(np.float32)
    path = write_fasttext_bin(sandbox.root / name, words, matrix, minn=2, maxn=4, bucket=50)
    sandbox.paths["other"] = str(path)
    return path


@case(
    "fingerprint-other-vectors-ElmocEmbedder",
    ConfigurationError,
    "{fasttext}",
    "{other}",
    "allow_different_vectors",
)
def _fingerprint_embedder(sandbox):
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    other = _other_vectors(sandbox)
    return lambda: ElmocEmbedder(str(sandbox.archive), vectors_path=str(other))


@case(
    "fingerprint-other-vectors-load_archive",
    ConfigurationError,
    "{fasttext}",
    "{other}",
    "fingerprint",
)
def _fingerprint_load_archive(sandbox):
    from allennlp.models.archival import load_archive

    other = _other_vectors(sandbox)
    key = "fasttext.vectors_path"
    overrides = {
        f"dataset_reader.token_indexers.{key}": str(other),
        f"model.text_field_embedder.token_embedders.{key}": str(other),
    }
    return lambda: load_archive(str(sandbox.archive), overrides=overrides)


@case(
    "fingerprint-unrelated-bin-next-to-moved-archive",
    ConfigurationError,
    "{other}",
    "{fasttext}",
    "a different file",
)
def _fingerprint_moved(sandbox):
    """An archive moved to another machine, next to an unrelated .bin with the same name."""
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    with tarfile.open(sandbox.archive) as tar:
        config = json.load(tar.extractfile("config.json"))
    elsewhere = "/nonexistent/machine/" + sandbox.fasttext.name
    config["dataset_reader"]["token_indexers"]["fasttext"]["vectors_path"] = elsewhere
    embedders = config["model"]["text_field_embedder"]["token_embedders"]
    embedders["fasttext"]["vectors_path"] = elsewhere
    moved = write_archive(
        sandbox.archive, sandbox.root / "moved" / "model.tar.gz", [], config=config
    )
    _other_vectors(sandbox, "moved/" + sandbox.fasttext.name)
    return lambda: ElmocEmbedder(str(moved))


# ---------------------------------------------------------------------- elmoc-embed


def _embed_call(sandbox, **options):
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    sentences = sandbox.root / "in.txt"
    sentences.write_text("the bank raised its rate\n\na dog\n")
    sandbox.paths["input"] = str(sentences)
    output = sandbox.root / options.pop("output", "out.hdf5")
    sandbox.paths["output"] = str(output)
    return lambda: embed_file(str(sandbox.archive), str(sentences), str(output), **options)


@case("elmoc-embed-existing-output-without-force", ConfigurationError, "{output}", "--force")
def _embed_existing(sandbox):
    call = _embed_call(sandbox)
    Path(sandbox.paths["output"]).write_bytes(b"an earlier export")
    return call


case("elmoc-embed-batch-size-0", ConfigurationError, "--batch-size", "got 0", absent=("out.hdf5",))(
    lambda sandbox: _embed_call(sandbox, batch_size=0)
)
case("elmoc-embed-output-is-the-input", ConfigurationError, "is the input file")(
    lambda sandbox: _embed_call(sandbox, output="in.txt")
)
case("elmoc-embed-output-is-a-directory", ConfigurationError, "is a directory")(
    lambda sandbox: (sandbox.root / "dir").mkdir() or _embed_call(sandbox, output="dir")
)
case("elmoc-embed-output-folder-missing", ConfigurationError, "does not exist")(
    lambda sandbox: _embed_call(sandbox, output="missing/out.hdf5")
)


@case(
    "elmoc-embed-input-not-utf8", ConfigurationError, "{input}", "not UTF-8", absent=("out.hdf5",)
)
def _embed_latin1(sandbox):
    call = _embed_call(sandbox)
    Path(sandbox.paths["input"]).write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    return call


@case(
    "elmoc-embed-disk-full",
    DiskFullError,
    "No space left on device",
    "{output}",
    absent=("out.hdf5",),
)
def _embed_disk_full(sandbox):
    """The first failed write stops the export, with one error naming the file (no partial)."""
    import h5py

    call = _embed_call(sandbox, batch_size=1)

    def full(self):
        raise _no_space(sandbox.paths["output"])

    def run():
        original, h5py.File.flush = h5py.File.flush, full
        try:
            call()
        finally:
            h5py.File.flush = original

    return run


@case(
    "elmoc-embed-input-is-a-folder",
    ConfigurationError,
    "{folder}",
    "is a directory",
    absent=("out.hdf5",),
)
def _embed_folder_input(sandbox):
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    folder = sandbox.root / "sentences"
    folder.mkdir()
    sandbox.paths["folder"] = str(folder)
    return lambda: embed_file(str(sandbox.archive), str(folder), str(sandbox.root / "out.hdf5"))


@case(
    "elmoc-embed-output-folder-not-writable",
    ConfigurationError,
    "not writable",
    absent=("locked/out.hdf5",),
)
def _embed_unwritable(sandbox):
    if os.geteuid() == 0:
        pytest.skip("root may write anywhere")
    (sandbox.root / "locked").mkdir(mode=0o500)
    return _embed_call(sandbox, output="locked/out.hdf5")


@case(
    "elmoc-embed-cuda-device-without-cuda",
    ConfigurationError,
    "--cuda-device 0",
    absent=("out.hdf5",),
)
def _embed_cuda(sandbox):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    return _embed_call(sandbox, cuda_device=0)


@case(
    "elmoc-embed-archive-refused-before-anything-is-written",
    UnsafeArchiveError,
    "{archive}",
    absent=("out.hdf5",),
)
def _embed_unsafe(sandbox):
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    path = sandbox.crafted_copy("duplicate-config")
    sentences = sandbox.root / "in.txt"
    sentences.write_text("the bank\n")
    return lambda: embed_file(str(path), str(sentences), str(sandbox.root / "out.hdf5"))


# ---------------------------------------------------------------------- merge, recover, vectors


@case("merge-bilm-existing-output-without-force", ConfigurationError, "{output}", "--force")
def _merge_existing(sandbox):
    from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives

    output = sandbox.root / "merged.tar.gz"
    output.write_bytes(b"an earlier merge")
    sandbox.paths["output"] = str(output)
    return lambda: merge_bilm_archives(str(sandbox.archive), str(sandbox.archive), str(output))


@case("merge-bilm-output-is-an-input", ConfigurationError, "{output}", "--force")
def _merge_onto_input(sandbox):
    from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives

    forward = sandbox.copy(sandbox.archive, "forward.tar.gz")
    sandbox.paths["output"] = str(forward)
    return lambda: merge_bilm_archives(str(forward), str(sandbox.archive), str(forward))


@case("fasttext-vectors-path-is-a-fifo", FastTextFormatError, "{bin}", "not a regular file")
def _fifo_vectors(sandbox):
    path = sandbox.root / "vectors.bin"
    os.mkfifo(path)
    sandbox.paths["bin"] = str(path)
    return lambda: FastTextVectors(path)


@case(
    "recover-with-only-a-damaged-checkpoint",
    ConfigurationError,
    "--recover",
    "{run}/model_state_e1_b0.th",
    unchanged=("run/model_state_e1_b0.th",),
    absent=("run/model_state_e1_b0.th.corrupt",),
)
def _recover_damaged(sandbox):
    from allennlp.commands.train import train_model_from_file

    config = str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")
    run_dir = sandbox.root / "run"
    sandbox.paths["run"] = str(run_dir)
    overrides = json.dumps({"trainer.num_epochs": 2})
    train_model_from_file(config, str(run_dir), overrides=overrides)
    for later in run_dir.glob("*_state_e2_b0.th"):
        later.unlink()
    damaged = run_dir / "model_state_e1_b0.th"
    damaged.write_bytes(damaged.read_bytes()[:100])
    return lambda: train_model_from_file(config, str(run_dir), overrides=overrides, recover=True)


# ---------------------------------------------------------------------- the predictor


_PREDICTORS: Dict[str, object] = {}


def _predict_call(sandbox, lines: List[str], command_line: bool = False, onto_input=False):
    """`allennlp predict ARCHIVE input.jsonl` on `lines`: the whole command, or its
    `_PredictManager` with the biLM predictor loaded once for the module (much faster)."""
    from allennlp.commands import main
    from allennlp.commands.predict import _PredictManager
    from allennlp.predictors import Predictor

    path = sandbox.root / "input.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    sandbox.paths["input"] = str(path)
    output = str(path if onto_input else sandbox.root / "predictions.jsonl")
    if not command_line:
        if "bilm" not in _PREDICTORS:
            _PREDICTORS["bilm"] = Predictor.from_path(str(sandbox.archive))
        _PREDICTORS["bilm"]._lines_read = 0  # a new input file
        manager = _PredictManager(_PREDICTORS["bilm"], str(path), output, 1, False, False)
        return manager.run
    argv = [
        "allennlp",
        "predict",
        str(sandbox.archive),
        str(path),
        "--silent",
        "--output-file",
        output,
    ]

    def run():
        previous = sys.argv
        sys.argv = argv
        try:
            main(prog="allennlp")
        finally:
            sys.argv = previous

    return run


_GOOD_LINE = '{"sentence": "the bank raised its rate"}'
_PREDICT_CASES = {
    "malformed-json": ('{"sentence": "the bank" "x"}', "not valid JSON"),
    "sentence-is-a-number": ('{"sentence": 42}', "'sentence' must be a string"),
    "sentence-is-null": ('{"sentence": null}', "got NoneType None"),
    "null-token": ('{"sentence": ["the", null]}', "'sentence'[1] must be a token string"),
    "number-token": ('{"sentence": ["the", 7]}', "'sentence'[1]"),
    "no-sentence-key": ('{"text": "the bank"}', "needs a 'sentence' key"),
    "line-is-a-list": ('["the", "bank"]', "expected a JSON object"),
}
_PREDICT_CASES.update(
    {
        "deeply-nested": ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        # Python >= 3.11 refuses to parse the number, older ones parse it and the key is named.
        "huge-number": ('{"sentence": ' + "9" * 10_000 + "}", "input line 3"),
    }
)
for _name, (_line, _words) in _PREDICT_CASES.items():
    # The bad line is the 3rd non-blank line of the file (allennlp skips blank lines before the
    # predictor sees them).
    case(
        f"predict-{_name}", ConfigurationError, "input line 3", _words, unchanged=("input.jsonl",)
    )(lambda sandbox, line=_line: _predict_call(sandbox, [_GOOD_LINE, _GOOD_LINE, "", line]))
case(
    "predict-malformed-json-command-line",
    ConfigurationError,
    "input line 2",
    "not valid JSON",
    unchanged=("input.jsonl",),
)(lambda sandbox: _predict_call(sandbox, [_GOOD_LINE, "", "{oops"], command_line=True))


@case(
    "predict-input-not-utf8",
    ConfigurationError,
    "{input}",
    "line 4",
    "not UTF-8",
    unchanged=("input.jsonl",),
)
def _predict_latin1(sandbox):
    """The line named counts every line (blank ones too), as an editor numbers them."""
    run = _predict_call(
        sandbox, [_GOOD_LINE, "", _GOOD_LINE, '{"sentence": "caf\u00e9"}'], command_line=True
    )
    path = Path(sandbox.paths["input"])
    path.write_bytes(
        path.read_bytes().replace("\u00e9".encode("utf-8"), "\u00e9".encode("latin-1"))
    )
    return _switched(run)  # polish of allennlp-wide behaviour: the switch's (docs/compat.md)


@case(
    "predict-output-file-is-the-input",
    ConfigurationError,
    "--output-file",
    "{input}",
    unchanged=("input.jsonl",),
)
def _predict_onto_input(sandbox):
    return _switched(_predict_call(sandbox, [_GOOD_LINE], command_line=True, onto_input=True))


# ---------------------------------------------------------------------- configs


def _train_tiny(sandbox, overrides: Dict, config: Path = FIXTURES_ROOT / "elmoc_tiny.jsonnet"):
    from allennlp.commands.train import train_model_from_file

    sandbox.paths["run"] = str(sandbox.root / "run")
    return lambda: train_model_from_file(
        str(config), str(sandbox.root / "run"), overrides=json.dumps(overrides)
    )


_CONFIG_CASES = {
    # key: (value, words)
    "data_loader.batch_sampler.batch_size": (0, "data_loader.batch_sampler.batch_size"),
    "data_loader.batch_sampler.batch_size=-3": (-3, "data_loader.batch_sampler.batch_size"),
    "trainer.num_epochs": (0, "trainer.num_epochs"),
    "trainer.optimizer.lr": (0, "trainer.optimizer.lr"),
    "trainer.grad_norm": (-1, "trainer.grad_norm"),
    "trainer.num_gradient_accumulation_steps": (0, "trainer.num_gradient_accumulation_steps"),
    "trainer.checkpointer.save_every_num_batches": (0, "save_every_num_batches"),
    "trainer.checkpointer.keep_most_recent_by_count": (0, "keep_most_recent_by_count"),
    "dataset_reader.max_sequence_length": (0, "max_sequence_length"),
    "model.contextualizer.cell_dim": (0, "cell_dim"),
    "model.contextualizer.projection_dim": (-1, "projection_dim"),
    "model.contextualizer.num_layers": (0, "num_layers"),
    "model.contextualizer.recurrent_dropout": (1.5, "recurrent_dropout"),
    "model.output_layer.embedding_dim": (0, "embedding_dim"),
    "trainer.learning_rate_scheduler.num_replicas": (0, "num_replicas"),
    "trainer.learning_rate_scheduler.warmup_steps": (-1, "warmup_steps"),
    "dataset_reader.max_token_characters": (0, "max_token_characters"),
}
for _key, (_value, _words) in _CONFIG_CASES.items():
    case(
        f"config-{_key}",
        ConfigurationError,
        _words,
        str(_value),
        unchanged=(),
        absent=("run/model.tar.gz", "run/model_state_e1_b0.th"),
    )(
        lambda sandbox, key=_key.split("=")[0], value=_value: _train_tiny(
            sandbox,
            {key: value, "trainer.num_epochs": 1} if key != "trainer.num_epochs" else {key: value},
        )
    )


@case(
    "config-empty-training-data",
    ConfigurationError,
    "{empty}",
    "has no text",
    unchanged=("empty.txt",),
    absent=("run/model.tar.gz",),
)
def _empty_corpus(sandbox):
    (sandbox.root / "empty.txt").write_text("\n\n")
    sandbox.paths["empty"] = str(sandbox.root / "empty.txt")
    return _train_tiny(
        sandbox,
        {
            "train_data_path": str(sandbox.root / "empty.txt"),
            "validation_data_path": None,
            "trainer.num_epochs": 1,
        },
    )


@case(
    "config-no-training-instances",
    ConfigurationError,
    "Epoch 0 had no training batch",
    "max_instances",
    unchanged=(),
    absent=("run/model.tar.gz",),
)
def _no_instances(sandbox):
    return _train_tiny(sandbox, {"dataset_reader.max_instances": 0, "trainer.num_epochs": 1})


def _train_ner_with(sandbox, **variables):
    """A run of the downstream NER config with the tiny biLM and these environment variables."""
    from allennlp.commands.train import train_model_from_file
    from allennlp.common.util import import_module_and_submodules

    import_module_and_submodules("allennlp_models.tagging")  # the config's crf_tagger
    environment = dict(_downstream_environment(sandbox, sandbox.archive), **variables)

    def run():
        with _environment(environment):
            train_model_from_file(
                str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"), str(sandbox.root / "run")
            )

    return run


@case(
    "config-wrong-ELMOC_DIM",
    ConfigurationError,
    "ELMOC_DIM",
    "is 1024",
    "gives 12-",
    unchanged=(),
    absent=("run/model.tar.gz",),
)
def _wrong_elmoc_dim(sandbox):
    return _train_ner_with(sandbox, ELMOC_DIM="1024")


@case(
    "config-wrong-ELMOC_FASTTEXT_DIM",
    ConfigurationError,
    "ELMOC_FASTTEXT_DIM",
    "is 300",
    "{fasttext}",
    "has 16 dimensions",
    unchanged=(),
    absent=("run/model.tar.gz",),
)
def _wrong_fasttext_dim(sandbox):
    return _train_ner_with(sandbox, ELMOC_FASTTEXT_DIM="300")


@case(
    "config-dotted-type-that-is-no-model",
    ConfigurationError,
    "os.system",
    "is not a Model",
    unchanged=(),
)
def _dotted_type(sandbox):
    # A config you write may name your own classes; the switch checks their kind.
    return _switched(_train_tiny(sandbox, {"model.type": "os.system", "trainer.num_epochs": 1}))


# ---------------------------------------------------------------------- full disk


def _no_space(path="checkpoint"):
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


@case(
    "disk-full-at-a-checkpoint",
    DiskFullError,
    "No space left on device",
    "{run}",
    "intact",
    unchanged=(),
    absent=("run/model.tar.gz", "run/model_state_e2_b0.th"),
    intact=("run/model_state_e1_b0.th", "run/training_state_e1_b0.th"),
)
def _full_disk_checkpoint(sandbox):
    """A checkpoint written when the disk is full: one clear error; no half checkpoint."""
    train = _train_tiny(sandbox, {"trainer.num_epochs": 2})

    def run():
        saved = torch.save
        calls = {"count": 0}

        def save(obj, handle, *args, **kwargs):
            calls["count"] += 1
            if calls["count"] > 2:  # the epoch-1 checkpoint is written, epoch 2's is not
                raise _no_space()
            return saved(obj, handle, *args, **kwargs)

        torch.save = save
        try:
            train()
        finally:
            torch.save = saved

    return run


@case(
    "disk-full-on-recover",
    DiskFullError,
    "No space left on device",
    "--recover",
    unchanged=("run/model_state_e1_b0.th", "run/training_state_e1_b0.th"),
    intact=("run/model_state_e1_b0.th", "run/training_state_e1_b0.th"),
)
def _full_disk_recover(sandbox):
    from allennlp.commands.train import train_model_from_file

    config = str(FIXTURES_ROOT / "elmoc_tiny.jsonnet")
    run_dir = sandbox.root / "run"
    sandbox.paths["run"] = str(run_dir)
    overrides = json.dumps({"trainer.num_epochs": 2})
    saved = torch.save

    def fail_after_first_epoch(obj, handle, *args, **kwargs):
        if (run_dir / "model_state_e1_b0.th").exists():
            raise _no_space()
        return saved(obj, handle, *args, **kwargs)

    torch.save = fail_after_first_epoch
    try:
        with pytest.raises(DiskFullError):
            train_model_from_file(config, str(run_dir), overrides=overrides)
    finally:
        torch.save = saved
    assert (run_dir / "training_state_e1_b0.th").exists()

    def disk_full(*args, **kwargs):
        raise _no_space()

    def run():
        torch.save = disk_full
        try:
            train_model_from_file(config, str(run_dir), overrides=overrides, recover=True)
        finally:
            torch.save = saved

    return run


class _FullFile:
    """A file open for writing on a full disk: every write fails with ENOSPC, as the kernel's would."""

    def __init__(self, handle, path: str):
        self._handle, self._path = handle, path

    def write(self, data):
        raise _no_space(self._path)

    def writelines(self, lines):
        raise _no_space(self._path)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._handle.close()

    def __iter__(self):
        return iter(self._handle)


def _disk_full_under(folder: Path, after: Callable[[], bool] = lambda: True):
    """`run` with the disk holding `folder` full (once `after()`): files opened there for writing
    (by `open`, `codecs.open`, atomic writers) accept no byte."""
    import builtins

    def prepare(run: Callable[[], object]) -> Callable[[], object]:
        def full_run():
            opened = builtins.open

            def full_open(file, mode="r", *args, **kwargs):
                handle = opened(file, mode, *args, **kwargs)
                path = (
                    os.path.abspath(os.fspath(file)) if isinstance(file, (str, os.PathLike)) else ""
                )
                if path.startswith(str(folder) + os.sep) and set(mode) & set("wax+") and after():
                    return _FullFile(handle, path)
                return handle

            builtins.open = full_open
            try:
                return run()
            finally:
                builtins.open = opened

        return full_run

    return prepare


@case(
    "disk-full-before-the-first-checkpoint",
    DiskFullError,
    "No space left on device",
    "{run}/meta.json",
    unchanged=(),
    absent=("run/meta.json", "run/model_state_e1_b0.th"),
)
def _full_disk_before_checkpoints(sandbox):
    """The disk fills once config.json is written: meta.json is the first file refused. One
    `DiskFullError` naming it; no empty meta.json (allennlp 2.10.1: a bare OSError, meta.json empty).
    """
    run_dir = sandbox.root / "run"
    train = _train_tiny(sandbox, {"trainer.num_epochs": 1})
    return _disk_full_under(run_dir, after=lambda: (run_dir / "config.json").exists())(train)


@case(
    "disk-full-at-the-vocabulary",
    DiskFullError,
    "No space left on device",
    "{run}/vocabulary",
    unchanged=(),
    absent=("run/model_state_e1_b0.th",),
)
def _full_disk_at_vocabulary(sandbox):
    """The disk fills once meta.json is written: the vocabulary's files are refused, one
    `DiskFullError` naming its folder."""
    run_dir = sandbox.root / "run"
    train = _train_tiny(sandbox, {"trainer.num_epochs": 1})
    return _disk_full_under(run_dir, after=lambda: (run_dir / "meta.json").exists())(train)


# ---------------------------------------------------------------------- the suite's own checks


def test_disk_full_is_logged_once(tmp_path, capsys):
    """A log file on a full disk: one line on stderr, not a traceback per record."""

    class FullDisk:
        def write(self, text):
            raise _no_space(str(tmp_path / "out.log"))

        def flush(self):
            raise _no_space(str(tmp_path / "out.log"))

    logger = logging.getLogger("elmoc-bad-input-test")
    handler = logging.FileHandler(tmp_path / "out.log", delay=True)
    handler.stream = FullDisk()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        quiet_full_log_files(logger)
        for index in range(200):
            logger.warning("record %d", index)
    finally:
        logger.removeHandler(handler)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "out.log" in lines[0] and "No space left" in lines[0]


def test_a_run_stopped_by_a_full_disk_recovers_once_there_is_space(sandbox):
    """The checkpoints a full disk left (see `disk-full-on-recover`) are complete."""
    _full_disk_recover(sandbox)
    run_dir = sandbox.root / "run"
    from allennlp.commands.train import train_model_from_file

    train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(run_dir),
        overrides=json.dumps({"trainer.num_epochs": 2}),
        recover=True,
    )
    assert (run_dir / "model.tar.gz").is_file()


def test_a_stale_partial_export_is_removed_by_the_next_run(sandbox):
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    sentences = sandbox.root / "in.txt"
    sentences.write_text("the bank\n")
    stale = sandbox.root / ".out.hdf5.partial-abc123"  # what `kill -9` mid-export leaves
    stale.write_bytes(b"half an hdf5 file")
    other = sandbox.root / ".other.hdf5.partial-abc123"  # another output's: left alone
    other.write_bytes(b"x")
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = sandbox.root / f".out.hdf5.partial-{finished.stdout.strip()}-x1"  # its writer is gone
    dead.write_bytes(b"x")
    # A running pid proves nothing (another PID namespace, another machine): a writer holds the
    # output's lock (tests/bad_input/test_one_writer.py), so with the lock free every partial
    # file of this output is stale.
    live = sandbox.root / f".out.hdf5.partial-{os.getpid()}-x2"
    live.write_bytes(b"x")
    embed_file(str(sandbox.archive), str(sentences), str(sandbox.root / "out.hdf5"), "top")
    assert not stale.exists() and not dead.exists() and not live.exists()
    assert other.exists()
    embed_file(
        str(sandbox.archive), str(sentences), str(sandbox.root / "out.hdf5"), "top", force=True
    )


def test_allow_different_vectors_is_the_documented_override(sandbox):
    from elmoc_allennlp.downstream.embedder import ElmocEmbedder

    other = _other_vectors(sandbox)
    embedder = ElmocEmbedder(
        str(sandbox.archive), vectors_path=str(other), allow_different_vectors=True
    )
    assert embedder.embed_sentence(["the", "bank"]).shape == (3, 2, 12)


def test_a_sound_archive_is_extracted_once_and_its_folder_removed_after_a_failure(sandbox):
    """Extra regular files (`include_in_archive`) load; `read_archive` extracts once per
    process; a user whose work failed releases the folder."""
    from elmoc_allennlp.common.archives import read_archive
    from tests.bad_input.conftest import _file

    path = write_archive(sandbox.archive, sandbox.root / "extra.tar.gz", [_file("extra/notes.txt")])
    first = read_archive(path)
    assert read_archive(str(path)) is first
    assert (first.directory / "extra" / "notes.txt").read_bytes() == b"planted\n"
    assert first.member("config.json") == first.directory / "config.json"
    first.release()
    assert first.directory.is_dir()  # the second user still has it
    first.release()
    assert not first.directory.exists()
    from allennlp.models.archival import load_archive

    assert load_archive(str(path)).model is not None


def test_a_dotted_type_in_an_archive_is_never_imported(sandbox):
    """`this` prints the Zen of Python when imported: refusing it must not import it."""
    from allennlp.models.archival import load_archive

    assert "this" not in sys.modules
    config = _with_model_type(sandbox, "this.Zen")
    path = write_archive(sandbox.archive, sandbox.root / "zen.tar.gz", [], config=config)
    with pytest.raises(ConfigurationError, match="this.Zen"):
        load_archive(str(path))
    assert "this" not in sys.modules


def test_a_pickle_in_weights_does_not_run_even_when_torch_is_told_to_allow_it(sandbox, monkeypatch):
    """`TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`, torch's opt-out: weights are still tensors only."""
    import pickle

    from allennlp.models.archival import load_archive
    from tests.bad_input.conftest import _file

    marker = sandbox.root / ESCAPE_NAME

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps({"weight": Payload()})
    path = write_archive(
        sandbox.archive,
        sandbox.root / "pickle.tar.gz",
        [_file("weights.th", payload)],
        drop=("weights.th",),
    )
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises((pickle.UnpicklingError, ConfigurationError, RuntimeError)):
        load_archive(str(path))
    assert not marker.exists()
    checkpoint = sandbox.root / "model_state_e1_b0.th"
    checkpoint.write_bytes(payload)
    (sandbox.root / "training_state_e1_b0.th").write_bytes(payload)
    from elmoc_allennlp.training.atomic_checkpointer import AtomicCheckpointer
    from allennlp.training.checkpointer import Checkpointer

    with pytest.raises((pickle.UnpicklingError, ConfigurationError, RuntimeError)):
        AtomicCheckpointer(sandbox.root).load_checkpoint()
    assert not marker.exists()
    from allennlp.nn.initializers import PretrainedModelInitializer

    from elmoc_allennlp.hardening import hardened_everywhere

    with hardened_everywhere():  # allennlp's own loaders: guarded only with the switch
        with pytest.raises((pickle.UnpicklingError, ConfigurationError, RuntimeError)):
            Checkpointer(sandbox.root).load_checkpoint()
        assert not marker.exists()
        for weights in (checkpoint, path):  # a weights file, an archive
            with pytest.raises((pickle.UnpicklingError, ConfigurationError, RuntimeError)):
                PretrainedModelInitializer(str(weights))
            assert not marker.exists()


def test_a_name_from_an_archive_runs_nothing_under_allennlp_predict(sandbox):
    """The reported case: `"type": "this.Zen"` printed the Zen of Python under `allennlp predict
    ... --include-package elmoc_allennlp`. Now: an error naming the archive, key and type.

    A fresh `allennlp predict` process (`tests/fresh_process.py`): the reported case is that command
    line, the plugin imported by `--include-package` at start."""
    config = _with_model_type(sandbox, "this.Zen")
    archive = write_archive(sandbox.archive, sandbox.root / "zen.tar.gz", [], config=config)
    lines = sandbox.root / "input.jsonl"
    lines.write_text(_GOOD_LINE + "\n")
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TMPDIR=str(sandbox.root / "tmp"))
    result = run_python(
        [
            "-m",
            "allennlp",
            "predict",
            str(archive),
            str(lines),
            "--include-package",
            "elmoc_allennlp",
        ],
        cwd=sandbox.root,
        env=environment,
        timeout=300,
    )
    assert result.returncode != 0
    assert "Beautiful is better than ugly" not in result.stdout + result.stderr
    assert f"{archive} (config.json): model.type is 'this.Zen'" in result.stderr
    assert list((sandbox.root / "tmp").iterdir()) == [], result.stderr[-3000:]


def test_crafted_archive_is_refused_by_allennlp_evaluate(crafted, outside, tmp_path):
    """
    `allennlp evaluate ARCHIVE ... --include-package elmoc_allennlp` in a fresh process.

    A fresh `allennlp` process: the refusal must come from the command line as a user runs it, the
    plugin imported by `--include-package` at start.
    """
    archive = tmp_path / "model.tar.gz"
    shutil.copy(crafted["dotdot-name"], archive)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TMPDIR=str(temporary))
    result = run_python(
        [
            "-m",
            "allennlp",
            "evaluate",
            str(archive),
            str(FIXTURES_ROOT / "lm_corpus" / "valid.txt"),
            "--include-package",
            "elmoc_allennlp",
        ],
        cwd=tmp_path,
        env=environment,
        timeout=300,
    )
    assert result.returncode != 0
    assert f"Refusing to extract model archive {archive}" in result.stderr
    assert "'../../" + ESCAPE_NAME in result.stderr
    assert list(temporary.iterdir()) == []
    assert not (tmp_path / ESCAPE_NAME).exists() and list(outside.iterdir()) == []
