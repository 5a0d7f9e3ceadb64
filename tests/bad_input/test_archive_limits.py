"""
What an archive may cost is bounded before it is paid, and loading it reads nothing outside it
(issue #35, sections 1, 2 and 4). Each case asserts the error's class and the archive member,
config key or limit variable it names.
"""
import errno
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import (
    UnsafeArchiveError,
    archive_limit,
    extract_archive,
    remove_extracted_archives,
)
from elmoc_allennlp.common.disk_full import DiskFullError
from tests.bad_input.conftest import write_archive

REPO_ROOT = Path(__file__).resolve().parents[2]


def _member(name: str, data: bytes = b"", kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _config(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile("config.json"))


def _weights(archive: Path) -> bytes:
    with tarfile.open(archive) as tar:
        return tar.extractfile("weights.th").read()


@pytest.fixture
def extraction(tmp_path):
    yield tmp_path / "extracted"
    remove_extracted_archives()


def _load(path: Path):
    from allennlp.models.archival import load_archive

    return load_archive(str(path))


# ---------------------------------------------------------------------- reads nothing outside it


def _with_model(elmoc_archive, tmp_path, name, edit) -> Path:
    config = _config(elmoc_archive)
    edit(config)
    return write_archive(elmoc_archive, tmp_path / f"{name}.tar.gz", [], config=config)


@pytest.mark.parametrize(
    "name, edit, keys",
    [
        # A downstream-like config whose biLM `archive_file` is a URL it does not carry.
        ("bilm-url", lambda c: c["model"]["text_field_embedder"]["token_embedders"]["fasttext"]
         .update(archive_file="http://127.0.0.1:9/bilm.tar.gz"),
         {"model.text_field_embedder.token_embedders.fasttext.archive_file"}),
        ("from-archive-url", lambda c: c.update(
            model={"type": "from_archive", "archive_file": "http://127.0.0.1:9/m.tar.gz"}),
         {"model.type", "model.archive_file"}),
        ("finetune-from-archive", lambda c: c.update(
            model={"type": "elmoc_bilm_from_archive", "archive_file": "other.tar.gz"}),
         {"model.type", "model.archive_file"}),
        ("reader-url", lambda c: c["dataset_reader"].update(vocab_url="https://example.org/v"),
         {"dataset_reader.vocab_url"}),
    ],
)
def test_an_archive_naming_a_url_or_another_archive_is_refused(
    elmoc_archive, tmp_path, name, edit, keys
):
    path = _with_model(elmoc_archive, tmp_path, name, edit)
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert str(path) in str(raised.value)
    assert any(key + " " in str(raised.value) for key in keys), str(raised.value)


def test_urls_that_loading_never_reads_are_allowed(elmoc_archive, tmp_path):
    # As allennlp-models configs have them: data paths, a GloVe `pretrained_file` (dropped by
    # `load_archive` before building) and the vocabulary's (read from the archive's files).
    def edit(config):
        config["train_data_path"] = "https://example.org/train.txt"
        config["vocabulary"] = {"pretrained_files": {"tokens": "https://example.org/glove.txt.gz"}}
        embedder = config["model"]["text_field_embedder"]["token_embedders"]["fasttext"]
        embedder["pretrained_file"] = "https://example.org/glove.txt.gz"

    config = _config(elmoc_archive)
    edit(config)
    from elmoc_allennlp.common.archives import check_self_contained

    check_self_contained(config, tmp_path, "an archive")


def test_an_archive_opening_itself_is_refused_without_recursion(elmoc_archive, tmp_path):
    path = tmp_path / "self.tar.gz"
    config = _config(elmoc_archive)
    config["model"] = {"type": "from_archive", "archive_file": str(path)}
    write_archive(elmoc_archive, path, [], config=config)
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert re.search(r"model\.(type|archive_file) ", str(raised.value))


# ---------------------------------------------------------------------- bounded amplification


def test_vocabulary_lines_and_bytes_are_bounded(elmoc_archive, tmp_path, monkeypatch, extraction):
    path = write_archive(
        elmoc_archive, tmp_path / "lines.tar.gz", [_member("vocabulary/tokens.txt", b"a\n" * 2000)]
    )
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_VOCABULARY_LINES", "1000")
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "vocabulary/tokens.txt"
    assert "ELMOC_ARCHIVE_MAX_VOCABULARY_LINES" in str(raised.value)
    assert not extraction.exists()
    monkeypatch.delenv("ELMOC_ARCHIVE_MAX_VOCABULARY_LINES")
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES", "3000")
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert "ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES" in str(raised.value)


def test_a_namespace_file_not_utf8_is_refused_by_line(elmoc_archive, tmp_path, extraction):
    latin1 = "ok\ncaf\u00e9\n".encode("latin-1")
    path = write_archive(elmoc_archive, tmp_path / "latin1.tar.gz", [_member("vocabulary/labels.txt", latin1)])
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "vocabulary/labels.txt"
    assert "line 2" in str(raised.value)


def test_a_folder_where_vocabulary_lock_should_be_is_refused(elmoc_archive, tmp_path, extraction):
    path = write_archive(elmoc_archive, tmp_path / "lock.tar.gz",
                         [_member("vocabulary/.lock", kind=tarfile.DIRTYPE)],
                         drop=("vocabulary/.lock",))
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "vocabulary/.lock"


@pytest.mark.parametrize("components", [900, 1000])
def test_deep_member_names_are_refused_before_any_folder(elmoc_archive, tmp_path, extraction, components):
    name = "/".join(["d"] * components) + "/f"
    path = write_archive(elmoc_archive, tmp_path / "deep.tar.gz", [_member(name, b"x")], first=True)
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert "ELMOC_ARCHIVE_MAX_DEPTH" in str(raised.value)
    assert raised.value.member == name[:200]
    assert not extraction.exists()


def test_folder_count_is_bounded(elmoc_archive, tmp_path, monkeypatch, extraction):
    extra = [_member(f"notes/{index}/f", b"x") for index in range(60)]
    path = write_archive(elmoc_archive, tmp_path / "folders.tar.gz", extra)
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_FOLDERS", "50")
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert "ELMOC_ARCHIVE_MAX_FOLDERS" in str(raised.value)
    assert raised.value.member.startswith("notes/")


def test_a_300_character_member_name_is_refused_by_name(elmoc_archive, tmp_path, extraction):
    name = "notes/" + "n" * 300
    path = write_archive(elmoc_archive, tmp_path / "long.tar.gz", [_member(name, b"x")])
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == name


def _with_weights(elmoc_archive, path: Path, data: bytes) -> Path:
    return write_archive(elmoc_archive, path, [_member("weights.th", data)], drop=("weights.th",))


def test_a_compressed_weights_record_is_refused(elmoc_archive, tmp_path, extraction):
    original = zipfile.ZipFile(io.BytesIO(_weights(elmoc_archive)))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as deflated:
        for info in original.infolist():
            deflated.writestr(info.filename, original.read(info))
    path = _with_weights(elmoc_archive, tmp_path / "deflated.tar.gz", buffer.getvalue())
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "weights.th"
    assert "compressed record" in str(raised.value)


def test_a_tiny_record_rebuilding_a_huge_tensor_is_refused(elmoc_archive, tmp_path, extraction):
    buffer = io.BytesIO()
    torch.save({"huge": torch.zeros(1).expand(1 << 20, 1 << 20)}, buffer)
    assert len(buffer.getvalue()) < 5000
    path = _with_weights(elmoc_archive, tmp_path / "strided.tar.gz", buffer.getvalue())
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.member == "weights.th"
    assert "'huge'" in str(raised.value)


def test_merge_refuses_a_zero_stride_tensor_before_comparing(elmoc_archive, tmp_path):
    from elmoc_allennlp.commands.merge_bilm import merge_bilm_archives

    buffer = io.BytesIO()
    torch.save({"huge": torch.zeros(1).expand(1 << 20, 1 << 20)}, buffer)
    first = _with_weights(elmoc_archive, tmp_path / "a.tar.gz", buffer.getvalue())
    second = _with_weights(elmoc_archive, tmp_path / "b.tar.gz", buffer.getvalue())
    with pytest.raises(UnsafeArchiveError) as raised:
        merge_bilm_archives(first, second, tmp_path / "merged.tar.gz")
    assert raised.value.member == "weights.th"
    assert not (tmp_path / "merged.tar.gz").exists()


def _merge(forward, backward):
    from elmoc_allennlp.commands.merge_bilm import merge_bilm_state_dicts

    return merge_bilm_state_dicts(forward, backward)


def _through_a_file(state, tmp_path, name):
    """`state` as a merge reads it: saved and loaded, so that views keep sharing storages."""
    from elmoc_allennlp.common.torch_versions import load_tensors

    torch.save(state, tmp_path / name)
    return load_tensors(str(tmp_path / name))


def _views(storage, offsets, length=999_000):
    return {f"_contextualizer.input_projection.p{i}": storage[o : o + length] for i, o in enumerate(offsets)}


@pytest.fixture
def compared_values(monkeypatch):
    """How many values `torch.equal` reads (both sides of each call counted once)."""
    counted = [0]
    original = torch.equal

    def equal(left, right):
        counted[0] += left.numel()
        return original(left, right)

    monkeypatch.setattr(torch, "equal", equal)
    return counted


def test_views_of_one_storage_are_compared_once(tmp_path, compared_values):
    """200 parameters viewing one storage of 10^6 values: 10^6 values compared, not 2 x 10^8."""
    storage = torch.randn(1_000_000)
    forward = _through_a_file(_views(storage, range(200)), tmp_path, "forward.th")
    backward = _through_a_file(_views(storage.clone(), range(200)), tmp_path, "backward.th")
    merged = _merge(forward, backward)
    assert compared_values[0] == 1_000_000
    assert all(torch.equal(merged[key], forward[key]) for key in forward)
    changed = storage.clone()
    changed[150_000] += 1  # inside every view: the first key compared differs
    backward = _through_a_file(_views(changed, range(200)), tmp_path, "changed.th")
    with pytest.raises(ConfigurationError, match="input_projection.p0 differs"):
        _merge(forward, backward)


def test_views_laid_out_differently_compare_by_value_within_a_bound(tmp_path, compared_values):
    weight = torch.randn(3, 4)
    forward = {"_contextualizer.input_projection.weight": weight.t()}  # not contiguous
    backward = {"_contextualizer.input_projection.weight": weight.t().contiguous()}
    _merge(forward, backward)
    # The same values at other offsets of their storages: compared value by value, which many
    # views of one storage would make unbounded; refused once it exceeds what the files hold.
    storage = torch.randn(1_000_000)
    forward = _through_a_file(_views(storage, range(200)), tmp_path, "forward.th")
    shifted = torch.cat([torch.zeros(1), storage])
    backward = _through_a_file(_views(shifted, range(1, 201)), tmp_path, "backward.th")
    with pytest.raises(ConfigurationError, match="input_projection.p2: .*than their storages hold"):
        _merge(forward, backward)
    assert compared_values[0] <= 2_000_001 + 999_000


def test_layer_counts_past_the_parameter_limit_are_refused_before_building(
    elmoc_archive, tmp_path
):
    path = _with_model(elmoc_archive, tmp_path, "layers",
                       lambda c: c["model"]["contextualizer"].update(num_layers=1_000_000_000))
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert "model.contextualizer.num_layers" in str(raised.value)
    assert "ELMOC_ARCHIVE_MAX_PARAMETERS" in str(raised.value)


def test_a_cell_dim_its_weights_do_not_hold_is_refused_before_building(elmoc_archive, tmp_path):
    path = _with_model(elmoc_archive, tmp_path, "cell",
                       lambda c: c["model"]["contextualizer"].update(cell_dim=1_000_000))
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert "config.json: model.contextualizer.cell_dim" in str(raised.value)


def test_a_carried_biLM_config_is_bounded_too(elmoc_archive, tmp_path, extraction):
    carried = _config(elmoc_archive)
    carried["model"]["contextualizer"]["num_layers"] = 1_000_000_000
    member = "elmoc_bilm/0123456789abcdef/config.json"
    path = write_archive(elmoc_archive, tmp_path / "carried.tar.gz",
                         [_member(member, json.dumps(carried).encode())])
    with pytest.raises(ConfigurationError) as raised:
        extract_archive(path, extraction)
    assert member in str(raised.value)
    assert "ELMOC_ARCHIVE_MAX_PARAMETERS" in str(raised.value)
    assert not extraction.exists()


def test_the_tiny_archives_bound_holds_for_its_own_config(elmoc_archive, extraction):
    from elmoc_allennlp.common.archives import check_weights_file, config_parameter_bound, read_config

    directory = extract_archive(elmoc_archive, extraction)
    held = check_weights_file(Path(directory) / "weights.th", "tiny", "weights.th")
    state = torch.load(Path(directory) / "weights.th")
    assert held == sum(value.numel() for value in state.values())
    bound, _ = config_parameter_bound(read_config(directory, "tiny")["model"])
    assert 0 < bound <= held


# ---------------------------------------------------------------------- unclear errors


def test_json_nested_600_deep_is_refused_naming_the_member(elmoc_archive, tmp_path):
    nested = "[" * 600 + "]" * 600
    config = json.dumps(_config(elmoc_archive))[:-1] + f', "deep": {nested}}}'
    path = write_archive(elmoc_archive, tmp_path / "deep.tar.gz", [], config=config.encode())
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert "config.json" in str(raised.value) and str(path) in str(raised.value)


@pytest.mark.parametrize("value", ["\u00b2", "9" * 5000, "-1", "0"])
def test_a_limit_variable_not_a_positive_integer_is_named(monkeypatch, value):
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_MEMBERS", value)
    with pytest.raises(ConfigurationError) as raised:
        archive_limit("ELMOC_ARCHIVE_MAX_MEMBERS")
    assert "ELMOC_ARCHIVE_MAX_MEMBERS" in str(raised.value)
    assert len(str(raised.value)) < 300


def test_a_full_disk_during_extraction_names_archive_and_member(
    elmoc_archive, tmp_path, monkeypatch, extraction
):
    import elmoc_allennlp.common.archives.extraction as archives

    def full(source, out, length=0):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(archives.shutil, "copyfileobj", full)
    with pytest.raises(DiskFullError) as raised:
        extract_archive(elmoc_archive, extraction)
    assert raised.value.errno == errno.ENOSPC
    assert str(elmoc_archive) in str(raised.value) and "'config.json'" in str(raised.value)
    assert not extraction.exists()


# ---------------------------------------------------------------------- memory to refuse

class _Repeated(io.RawIOBase):
    """`unit` x `times`, read in chunks: the bombs are built without holding them."""

    def __init__(self, unit: bytes, times: int) -> None:
        self.unit, self.left = unit, len(unit) * times

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self.left) // len(self.unit) * len(self.unit) or min(len(buffer), self.left)
        buffer[:count] = (self.unit * (count // len(self.unit) + 1))[:count]
        self.left -= count
        return count


def _repeated_member(name: str, unit: bytes, times: int = 1):
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(unit) * times, 0o644
    return info, io.BufferedReader(_Repeated(unit, times), 1 << 20)


def _bombs(elmoc_archive: Path, root: Path) -> dict:
    deflated = io.BytesIO()
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as weights:
        weights.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        with weights.open("archive/data/0", "w", force_zip64=True) as record:
            for _ in range(128):
                record.write(bytes(1 << 20))
    deflated_member = _member("weights.th", deflated.getvalue())
    return {
        "lines": write_archive(elmoc_archive, root / "lines.tar.gz",
                               [_repeated_member("vocabulary/tokens.txt", b"a\n", 5_000_000)]),
        "folders": write_archive(elmoc_archive, root / "folders.tar.gz",
                                 [_member("/".join(["d"] * 900) + "/f", b"x")]),
        "deflated": write_archive(elmoc_archive, root / "deflated.tar.gz", [deflated_member],
                                  drop=("weights.th",)),
    }


_EXTRACT = r"""
import json, os, resource, sys
from elmoc_allennlp.common.archives import extract_archive
bombs = json.loads(sys.argv[1])
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
try:  # Linux: restart the peak (VmHWM) here, past the imports' transient peak
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    start, peak_key = status("VmRSS"), "VmHWM"
except OSError:
    start, peak_key = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, None
refused = {}
for name, path in bombs.items():
    try:
        extract_archive(path, path + ".extracted")
    except Exception as error:
        refused[name] = [type(error).__name__, os.path.getsize(path), os.path.exists(path + ".extracted")]
peak = status(peak_key) if peak_key else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"refused": refused, "before_kb": start, "maxrss_kb": peak}))
"""


def test_small_bombs_are_refused_in_bounded_memory(elmoc_archive, tmp_path):
    bombs = {name: str(path) for name, path in _bombs(elmoc_archive, tmp_path).items()}
    result = subprocess.run(
        [sys.executable, "-c", _EXTRACT, json.dumps(bombs)],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert set(report["refused"]) == set(bombs), report
    for name, (kind, size, extracted) in report["refused"].items():
        assert kind == "UnsafeArchiveError" and not extracted, (name, kind)
        assert size < 100_000, (name, size)
    # Refusing them all costs a few MB past the interpreter with torch and allennlp imported.
    assert report["maxrss_kb"] - report["before_kb"] < 200_000, report


# ---------------------------------------------------------------------- a hostile round (issue #41)


def _huge_storage_weights() -> bytes:
    """A torch weights zip whose `data.pkl` declares a FloatStorage of 2^33 values and whose
    central directory says its record holds those 32 GiB; the record holds 16 bytes."""
    import collections
    import pickle

    numel = 1 << 33

    class Storage:
        pass

    storage = Storage()

    class Tensor:
        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2,
                    (storage, 0, (numel,), (1,), False, collections.OrderedDict()))

    class Pickler(pickle.Pickler):
        def persistent_id(self, value):
            return ("storage", torch.FloatStorage, "0", "cpu", numel) if value is storage else None

    data = io.BytesIO()
    Pickler(data, protocol=2).dump(collections.OrderedDict(huge=Tensor()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as weights:
        weights.writestr("archive/data.pkl", data.getvalue())
        weights.writestr("archive/data/0", b"\0" * 16)
        record = weights.getinfo("archive/data/0")
        record.file_size = record.compress_size = numel * 4  # written so into the directory
    return buffer.getvalue()


def test_a_weights_header_declaring_a_huge_storage_is_refused_before_torch(
    elmoc_archive, tmp_path, extraction
):
    weights = _huge_storage_weights()
    assert zipfile.ZipFile(io.BytesIO(weights)).getinfo("archive/data/0").file_size == 1 << 35
    path = _with_weights(elmoc_archive, tmp_path / "huge-storage.tar.gz", weights)
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.archive == str(path) and raised.value.member == "weights.th"
    assert f"'archive/data/0' whose header declares {1 << 35:,} bytes" in str(raised.value)
    assert not extraction.exists()


def _carried_bilm(vocabulary: list) -> list:
    """Members of a biLM copy carried in `elmoc_bilm/`: a config that builds nothing, and
    `vocabulary` (member name under the copy's folder, kind)."""
    config = {"model": {"type": "elmoc_bilm"}, "dataset_reader": {"type": "elmoc_lm_corpus"}}
    folder = "elmoc_bilm/0123456789abcdef/"
    return [_member(folder + "config.json", json.dumps(config).encode())] + [
        _member(folder + name, b"x\n" if kind == tarfile.REGTYPE else b"", kind)
        for name, kind in vocabulary
    ]


@pytest.mark.parametrize(
    "vocabulary, named",
    [
        # A folder where the copy's vocabulary/.lock should be (was a bare IsADirectoryError).
        ([("vocabulary/non_padded_namespaces.txt", tarfile.REGTYPE), ("vocabulary/.lock", tarfile.DIRTYPE)],
         "elmoc_bilm/0123456789abcdef/vocabulary/.lock"),
        # No vocabulary at all, or without the file allennlp opens first (was a FileNotFoundError
        # naming temporary paths).
        ([], "elmoc_bilm/0123456789abcdef/vocabulary/"),
        ([("vocabulary/tokens.txt", tarfile.REGTYPE)], "elmoc_bilm/0123456789abcdef/vocabulary/"),
    ],
)
def test_a_carried_biLM_vocabulary_gets_the_main_archives_checks(
    elmoc_archive, tmp_path, extraction, vocabulary, named
):
    path = write_archive(elmoc_archive, tmp_path / "carried.tar.gz", _carried_bilm(vocabulary))
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.archive == str(path) and raised.value.member == named
    assert not extraction.exists()


def test_a_sound_carried_biLM_vocabulary_extracts(elmoc_archive, tmp_path, extraction):
    members = [("vocabulary/non_padded_namespaces.txt", tarfile.REGTYPE),
               ("vocabulary/tokens.txt", tarfile.REGTYPE)]
    path = write_archive(elmoc_archive, tmp_path / "carried.tar.gz", _carried_bilm(members))
    directory = Path(extract_archive(path, extraction))
    assert (directory / "elmoc_bilm/0123456789abcdef/vocabulary/tokens.txt").read_bytes() == b"x\n"


@pytest.mark.parametrize("value, written", [(float("inf"), "Infinity"), (float("-inf"), "-Infinity"),
                                            (float("nan"), "NaN")])
def test_nan_and_infinity_in_an_archived_config_are_refused_naming_the_key(
    elmoc_archive, tmp_path, value, written
):
    path = _with_model(elmoc_archive, tmp_path, f"config-{written}",
                       lambda c: c["model"]["contextualizer"].update(cell_dim=value))
    assert f'"cell_dim": {written}' in _raw_config(path)
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert f"{path} (config.json): model.contextualizer.cell_dim is {written}" in str(raised.value)


def _raw_config(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        return tar.extractfile("config.json").read().decode("utf-8")
