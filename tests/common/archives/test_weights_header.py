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
