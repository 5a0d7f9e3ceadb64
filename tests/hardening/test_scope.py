"""The ownership rule of the guards (`elmoc_allennlp/hardening/scope.py`): a config, run or archive is the
plugin's when its config names a component the plugin registers, decided once per config file; an
archive's member names and sizes never count, and a `.tar.gz` is read only up to its `config.json`.
"""

import io
import json
import os
import tarfile

import pytest

import allennlp.models.archival as archival
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.common.registrable import Registrable

import elmoc_allennlp  # noqa: F401  (registers the components, installs the guards)
from elmoc_allennlp.hardening import hardened_everywhere, scope

STOCK = {"model": {"type": "basic_classifier", "text_field_embedder": {"token_embedders": {}}}}
PLUGIN = {"model": {"type": "elmoc_bilm", "contextualizer": {"type": "elmoc_layer_norm_lstm"}}}


def _archive(path, members):
    """A `.tar.gz` of `(name, bytes)` members, in order."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return path


def _config(config) -> bytes:
    return json.dumps(config).encode("utf-8")


def test_the_plugin_names_are_its_registrations_less_its_stand_ins():
    from allennlp.common.util import import_module_and_submodules

    names = scope.plugin_names()
    import_module_and_submodules("elmoc_allennlp")  # what --include-package imports: nothing more
    registered = {
        name: cls.__module__
        for entries in Registrable._registry.values()
        for name, (cls, _) in entries.items()
        if cls.__module__.startswith("elmoc_allennlp.")
    }
    assert names == {
        name
        for name, module in registered.items()
        if not module.startswith("elmoc_allennlp.compat")
    }
    assert scope.plugin_names() is names  # computed once
    assert "elmoc_bilm" in names and "reduce_on_plateau" not in names


@pytest.mark.parametrize(
    "config, expected",
    [
        (STOCK, False),
        (PLUGIN, True),
        (
            {"model": {"type": "basic_classifier", "elmoc_notes": "elmoc_bilm"}},
            False,
        ),  # a name, not a type
        (
            {"model": {"type": "bcn", "elmo": {"archive_file": "bilm.tar.gz"}}},
            True,
        ),  # compat/elmoc_as_elmo.py
        ({"model": {"type": "elmoc_allennlp.models.BidirectionalLanguageModel"}}, True),
    ],
)
def test_a_config_is_the_plugins_when_it_names_a_plugin_component(config, expected):
    assert scope.plugin_config(config) is expected
    assert scope.plugin_config(Params(json.loads(json.dumps(config)))) is expected


def test_member_names_and_sizes_never_make_a_stock_archive_the_plugins(tmp_path, monkeypatch):
    stock = _archive(
        tmp_path / "stock.tar.gz",
        [
            ("config.json", _config(STOCK)),
            ("elmoc_notes.txt", b"x" * 5000),
            ("elmoc_bilm/a/config.json", b"{"),
        ],
    )
    for variable in (
        "ELMOC_ARCHIVE_MAX_MEMBERS",
        "ELMOC_ARCHIVE_MAX_BYTES",
        "ELMOC_ARCHIVE_MAX_JSON_BYTES",
    ):
        monkeypatch.setenv(variable, "1")
    assert not scope.plugin_archive(stock)
    # allennlp's own extraction, unchanged (the plugin's would refuse an archive without weights.th).
    with archival.extracted_archive(str(stock)) as directory:
        assert os.path.getsize(os.path.join(directory, "elmoc_notes.txt")) == 5000
    # Its config decides: the same archive naming a plugin component gets the plugin's checks.
    plugin = _archive(
        tmp_path / "plugin.tar.gz", [("config.json", _config(PLUGIN)), ("notes.txt", b"x")]
    )
    assert scope.plugin_archive(plugin)
    with pytest.raises(
        ConfigurationError, match="Refusing to extract .* past ELMOC_ARCHIVE_MAX_BYTES"
    ):
        with archival.extracted_archive(str(plugin)):
            pass


def test_an_archive_is_read_up_to_its_config_only(tmp_path):
    path = _archive(
        tmp_path / "model.tar.gz",
        [("config.json", _config(PLUGIN)), ("weights.th", os.urandom(1 << 20))],
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # damaged after the config: never read
    assert scope.plugin_archive(path)
    # A config.json that is not the first member is found further on.
    later = _archive(
        tmp_path / "later.tar.gz", [("notes.txt", b"x"), ("./config.json", _config(PLUGIN))]
    )
    assert scope.plugin_archive(later)


def _weights_like(size: int, seed: int) -> bytes:
    """Bytes that compress about as little as weights do but that deflate codes (not stores): a
    changed byte in them soon breaks decompression."""
    import random

    rng = random.Random(seed)
    pieces = [rng.getrandbits(64).to_bytes(8, "little") for _ in range(4096)]
    return b"".join(rng.choice(pieces) for _ in range(size // 8))


def _broken_at(data: bytes, offset: int) -> bytes:
    """`data` with one byte changed, at `offset` or the first byte after it where a change breaks
    decompression at once (within 64 bytes: a changed byte can also decode to other valid codes,
    which only a checksum at the end would catch)."""
    import zlib

    for position in range(offset, offset + 32):
        for mask in range(1, 256):
            damaged = data[:position] + bytes([data[position] ^ mask]) + data[position + 1 :]
            try:
                zlib.decompressobj(31).decompress(damaged[: position + 64])
            except zlib.error:
                return damaged
    raise AssertionError(f"no change of a byte from {offset} on breaks decompression at once")


@pytest.mark.parametrize(
    "offset",
    [
        k * size + delta
        for size, ks in ((scope.OWNERSHIP_READ, (8, 16)), (tarfile.RECORDSIZE, (1, 2)))
        for k in ks
        for delta in (-1, 0, 1)
    ],
)
def test_damage_past_the_config_leaves_an_archive_the_plugins(tmp_path, offset):
    """
    A byte flipped in the compressed weights, around multiples of the read size (and of tarfile's
    default, which met the damage before the config in a small archive): still the plugin's
    archive, and `load_archive` refuses it naming it, not allennlp's unchecked extraction.
    """
    from elmoc_allennlp.common.archives import CorruptArchiveError

    # A config of a real archive's size (~3 KB), whose compressed bytes run past the first read.
    config = dict(PLUGIN, notes=_weights_like(1600, 0).hex())
    path = _archive(
        tmp_path / "model.tar.gz",
        [("config.json", _config(config)), ("weights.th", _weights_like(96 << 10, offset))],
    )
    data = path.read_bytes()
    assert len(data) > 2 * tarfile.RECORDSIZE + 2
    path.write_bytes(_broken_at(data, offset))
    assert scope.plugin_archive(path)
    with pytest.raises(CorruptArchiveError, match=str(path)):
        archival.load_archive(str(path))


def test_the_decision_is_taken_once_per_version_of_the_config(tmp_path, monkeypatch):
    read = []
    plugin_text = scope.plugin_text
    monkeypatch.setattr(scope, "plugin_text", lambda data: read.append(data) or plugin_text(data))
    path = _archive(tmp_path / "model.tar.gz", [("config.json", _config(STOCK))])
    assert [scope.plugin_archive(path) for _ in range(3)] == [False] * 3 and len(read) == 1
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_bytes(_config(STOCK))
    assert not scope.plugin_run(run) and not scope.plugin_run(run) and len(read) == 2
    (run / "config.json").write_bytes(_config(PLUGIN) + b" ")  # another version of the file
    assert scope.plugin_run(run) and scope.plugin_archive(run) and len(read) == 3


@pytest.mark.parametrize(
    "config",
    [
        None,
        b'{"model": importstr "/etc/passwd"}',
        b'{"model": "\xff"}',
        b"[" * 5000 + b"]" * 5000,
        b"[1, 2]",
    ],
    ids=["none", "jsonnet", "not-utf8", "deeply-nested", "a-list"],
)
def test_an_archive_without_a_config_allennlp_writes_gets_the_checks(tmp_path, config):
    members = [("weights.th", b"x")] + ([("config.json", config)] if config else [])
    path = _archive(tmp_path / "model.tar.gz", members)
    assert scope.plugin_archive(path)
    with pytest.raises(ConfigurationError, match="Model archive|Refusing to extract"):
        with archival.extracted_archive(str(path)):
            pass


def test_a_config_cut_at_the_bound_decides_by_what_was_read(tmp_path, monkeypatch):
    monkeypatch.setattr(scope, "_READ_BYTES", 64)
    stock = _archive(
        tmp_path / "stock.tar.gz", [("config.json", _config(dict(STOCK, notes="x" * 100)))]
    )
    plugin = _archive(
        tmp_path / "plugin.tar.gz", [("config.json", _config(dict(PLUGIN, notes="x" * 100)))]
    )
    assert not scope.plugin_archive(stock) and scope.plugin_archive(plugin)


def test_what_is_no_archive_or_run_is_not_the_plugins_without_the_switch(tmp_path):
    text = tmp_path / "text.tar.gz"
    text.write_text("not an archive")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    empty = tmp_path / "empty_run"
    empty.mkdir()
    for path in (text, fifo, tmp_path / "missing.tar.gz"):
        assert not scope.plugin_archive(path), path
    assert not scope.plugin_run(empty)
    with hardened_everywhere():
        assert scope.plugin_archive(text) and scope.plugin_run(empty) and scope.plugin_config(STOCK)
