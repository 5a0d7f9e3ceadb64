"""
`weights.th` checked from its records' headers before torch reads it (`weights_header.py`, issue
#35 and the hostile round of #41): compressed records, tiny records rebuilding huge tensors and
headers declaring huge storages are refused, naming the member.
"""

import io
import zipfile

import pytest
import torch

from elmoc_allennlp.common.archives import UnsafeArchiveError, extract_archive
from tests.common.archives.conftest import _weights, _with_weights


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
            return (
                torch._utils._rebuild_tensor_v2,
                (storage, 0, (numel,), (1,), False, collections.OrderedDict()),
            )

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


def _storage_weights(place) -> bytes:
    """A few-KB torch weights zip whose `data.pkl` declares a FloatStorage of 2^33 values, not in a
    tensor but `place(storage)` (bare, in a set), beside a 16-byte record: nothing checked a storage
    outside a tensor (torch 2.13 refuses it itself, older ones allocated 32 GiB)."""
    import collections
    import pickle

    class Storage:
        pass

    storage = Storage()

    class Pickler(pickle.Pickler):
        def persistent_id(self, value):
            return (
                ("storage", torch.FloatStorage, "0", "cpu", 1 << 33) if value is storage else None
            )

    data = io.BytesIO()
    Pickler(data, protocol=4).dump(collections.OrderedDict(huge=place(storage)))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as weights:
        weights.writestr("archive/data.pkl", data.getvalue())
        weights.writestr("archive/data/0", b"\0" * 16)
        weights.writestr("archive/version", b"3\n")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "place",
    [lambda storage: storage, lambda storage: frozenset([storage])],
    ids=["bare", "in-a-set"],
)
def test_a_storage_outside_a_tensor_declaring_more_than_its_record_is_refused(
    place, elmoc_archive, tmp_path, extraction
):
    weights = _storage_weights(place)
    assert len(weights) < 5000
    path = _with_weights(elmoc_archive, tmp_path / "storage.tar.gz", weights)
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.archive == str(path) and raised.value.member == "weights.th"
    assert f"storage 'archive/data/0' whose header declares {1 << 33:,} values" in str(raised.value)
    assert "a record of 16 bytes" in str(raised.value)
    assert not extraction.exists()


def _legacy_with_a_zip_appended(real_weights: bytes) -> bytes:
    """torch's legacy (non-zip) format declaring a storage of 2^33 values (read as 32 GiB before its
    data), followed by a real weights zip: `zipfile` finds the zip from the end, torch reads the start.
    """
    import struct

    buffer = io.BytesIO()
    values = torch.arange(4, dtype=torch.float32)
    torch.save({"w": values}, buffer, _use_new_zipfile_serialization=False)
    data = bytearray(buffer.getvalue())
    tail = (
        struct.pack("<q", 4) + values.numpy().tobytes()
    )  # the storage: its count, then its values
    assert data.endswith(tail)
    data[len(data) - len(tail) : len(data) - len(tail) + 8] = struct.pack("<q", 1 << 33)
    return bytes(data) + real_weights


def test_a_legacy_weights_file_posing_as_a_zip_is_refused_before_torch(
    elmoc_archive, tmp_path, extraction
):
    weights = _legacy_with_a_zip_appended(_weights(elmoc_archive))
    assert zipfile.ZipFile(io.BytesIO(weights)).namelist()  # a zip to `zipfile`
    path = _with_weights(elmoc_archive, tmp_path / "legacy-zip.tar.gz", weights)
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert raised.value.archive == str(path) and raised.value.member == "weights.th"
    assert "a zip archive from its first byte" in str(raised.value)
    assert not extraction.exists()


def test_a_zip_with_data_before_its_first_record_is_refused(elmoc_archive, tmp_path, extraction):
    weights = b"PK\x03\x04" + bytes(60) + _weights(elmoc_archive)
    path = _with_weights(elmoc_archive, tmp_path / "prefixed.tar.gz", weights)
    with pytest.raises(UnsafeArchiveError) as raised:
        extract_archive(path, extraction)
    assert "data before its first record" in str(raised.value)
