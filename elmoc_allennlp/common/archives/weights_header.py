"""The pickle-header reader: what a torch weights file's tensors are, from its `data.pkl` and zip
directory, before torch reads anything, building no tensor and calling nothing but stand-ins."""

import collections
import io
import math
import os
import pickle
import zipfile
from typing import Any, Dict, Union

from elmoc_allennlp.common.archives.limits import UnsafeArchiveError, walk

# Bytes per element of the storage classes torch names in a weights file.
_STORAGE_BYTES = {
    "DoubleStorage": 8,
    "FloatStorage": 4,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
    "ComplexDoubleStorage": 16,
    "ComplexFloatStorage": 8,
    "UntypedStorage": 1,
}
# The largest `data.pkl` read to check the records (a state dict's is a few KB per 100 tensors).
_MAX_PICKLE_BYTES = 64 << 20


# What a zip file's first local record header starts with.
_ZIP_RECORD = b"PK\x03\x04"


_Storage = collections.namedtuple("_Storage", "kind key numel")
_Tensor = collections.namedtuple("_Tensor", "storage offset size stride")
# What the unpickler calls instead of torch's functions: records of what would be built.
_STANDINS = {
    "_rebuild_tensor": lambda storage, offset, size, stride, *rest: _Tensor(
        storage, offset, size, stride
    ),
    "_rebuild_parameter": lambda data, *rest: data,
    "_rebuild_from_type_v2": lambda function, new_type, args, state: function(*args),
}
_STANDINS["_rebuild_tensor_v2"] = _STANDINS["_rebuild_tensor"]
_STANDINS["_rebuild_parameter_with_state"] = _STANDINS["_rebuild_parameter"]


class _Refused(Exception):
    """A storage of `data.pkl` that torch would allocate from its declared size alone."""


class _HeaderUnpickler(pickle.Unpickler):
    """Reads what a weights file's tensors are (storages, offsets, sizes, strides), building none.
    Each storage, wherever it is (in a tensor, bare, in a set), must have a record of its bytes."""

    def __init__(self, data: bytes, records: Dict[str, zipfile.ZipInfo], prefix: str) -> None:
        super().__init__(io.BytesIO(data))
        self.records, self.prefix = records, prefix

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in _STORAGE_BYTES:
            return name
        if module == "torch._utils" and name in _STANDINS:
            return _STANDINS[name]
        from elmoc_allennlp.common.torch_versions import _allowed_globals

        allowed = _allowed_globals().get((module, name))
        if allowed is None or module == "torch._utils":
            raise pickle.UnpicklingError(f"holds {module}.{name}, not a plain dense tensor")
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"holds an unknown persistent record {str(pid)[:80]}")
        _, kind, key, _, numel = pid
        if (
            kind not in _STORAGE_BYTES
            or type(numel) is not int
            or numel < 0
            or not isinstance(key, str)
        ):
            raise pickle.UnpicklingError(
                f"holds a storage of type {str(kind)[:40]} and size {str(numel)[:40]}"
            )
        name = f"{self.prefix}data/{key}"
        record, expected = self.records.get(name), numel * _STORAGE_BYTES[kind]
        if record is None or record.file_size != expected:
            size = "no record" if record is None else f"a record of {record.file_size:,} bytes"
            raise _Refused(
                f"has a storage {name[:200]!r} whose header declares {numel:,} values ({expected:,} bytes) "
                f"but has {size}"
            )
        return _Storage(kind, key, numel)


def check_weights_file(path: Union[str, os.PathLike], archive: str, member: str) -> int:
    """
    Checks a torch weights file from its headers and returns how many values it holds: a zip of
    uncompressed records, each storage's record the size its header declares, each tensor inside its
    storage. Raises `UnsafeArchiveError` naming the member and the record or tensor key.
    """

    def refuse(reason: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(archive, member, reason)

    not_zip = (
        "is not a torch weights file (a zip archive from its first byte, as torch.save writes)"
    )
    with open(path, "rb") as weights:
        # torch reads a file not starting with a zip record in its legacy format, whose storages it
        # allocates from their declared sizes: a legacy file with a zip appended would pass as the zip.
        if weights.read(len(_ZIP_RECORD)) != _ZIP_RECORD:
            raise refuse(not_zip)
    try:
        zipped = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        raise refuse(not_zip) from None
    with zipped:
        if not any(info.header_offset == 0 for info in zipped.infolist()):
            raise refuse(f"{not_zip[:-1]}; it has data before its first record)")
        records = {}
        for info in zipped.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise refuse(
                    f"has a compressed record {info.filename!r} (torch.save stores them uncompressed)"
                )
            records[info.filename] = info
        # Stored records are parts of the file: together no larger than it (torch allocates what a
        # header declares).
        size, declared = os.path.getsize(path), 0
        for info in sorted(records.values(), key=lambda info: -info.file_size):
            declared += info.file_size
            if declared > size:
                raise refuse(
                    f"has a record {info.filename!r} whose header declares {info.file_size:,} "
                    f"bytes, past what the file of {size:,} bytes holds"
                )
        pickles = [name for name in records if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise refuse("has no single data.pkl record")
        prefix = pickles[0][: -len("data.pkl")]
        if records[pickles[0]].file_size > _MAX_PICKLE_BYTES:
            raise refuse(f"has a data.pkl of {records[pickles[0]].file_size:,} bytes")
        try:
            state = _HeaderUnpickler(zipped.read(pickles[0]), records, prefix).load()
        except _Refused as refused:
            raise refuse(str(refused)) from None
        except (
            pickle.UnpicklingError,
            EOFError,
            ValueError,
            TypeError,
            AttributeError,
            IndexError,
            KeyError,
            RecursionError,
            MemoryError,
            zipfile.BadZipFile,
        ) as error:
            raise refuse(
                f"is not a file of tensors ({type(error).__name__}: {str(error)[:200]})"
            ) from None
    storages: Dict[str, int] = {}
    for key, _, tensor, _ in walk(state):
        if not isinstance(tensor, _Tensor):
            continue
        storage = tensor.storage
        if not isinstance(storage, _Storage):
            raise refuse(f"has a tensor {key!r} without a storage")
        record = records.get(f"{prefix}data/{storage.key}")
        expected = storage.numel * _STORAGE_BYTES[storage.kind]
        if record is None or record.file_size != expected:
            size = "no record" if record is None else f"a record of {record.file_size:,} bytes"
            raise refuse(
                f"has a tensor {key!r} whose storage declares {expected:,} bytes but has {size}"
            )
        storages[storage.key] = storage.numel
        size, stride, offset = tensor.size, tensor.stride, tensor.offset
        if not (
            isinstance(offset, int)
            and isinstance(size, tuple)
            and isinstance(stride, tuple)
            and len(size) == len(stride)
            and all(isinstance(n, int) and n >= 0 for n in size + stride)
            and offset >= 0
        ):
            raise refuse(
                f"has a tensor {key!r} of size {str(size)[:80]} and stride {str(stride)[:80]}"
            )
        numel = math.prod(size)
        extent = offset + sum((n - 1) * step for n, step in zip(size, stride)) + 1 if numel else 0
        if numel > storage.numel or extent > storage.numel:
            raise refuse(
                f"has a tensor {key!r} of {numel:,} elements (size {list(size)}, stride "
                f"{list(stride)}) rebuilt from a storage of {storage.numel:,}"
            )
    return sum(storages.values())
