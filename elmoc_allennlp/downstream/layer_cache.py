"""A frozen biLM's layers per sentence in an LMDB file, as raw bytes behind a header (docs/layer_cache.md)."""

import difflib
import errno
import hashlib
import json
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import lmdb
import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import TensorCache
from allennlp.nn.util import get_mask_from_sequence_lengths

logger = logging.getLogger(__name__)

# Storage dtypes by config name, their codes in a value's header.
CACHE_DTYPES: Dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16}
_DTYPE_CODES = {"float32": 1, "float16": 2}
_NUMPY_DTYPES = {"float32": numpy.dtype("<f4"), "float16": numpy.dtype("<f2")}
# Bumped when the fingerprint, the key or the value layout changes: older caches are not read.
CACHE_FORMAT = 1
# A value: magic, dtype code, layers, timesteps (words + 2 boundaries), dim, CRC-32 of the payload.
_VALUE_MAGIC = b"ELMOCLY1"
_HEADER = struct.Struct("<8sBIIII")
# The entry recording what a cache file holds (checked when it is opened).
_METADATA_KEY = b"__elmoc_layer_cache__"
_NO_SPACE = tuple(
    os.strerror(code) for code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
)


def _without_paths(config: Any) -> Any:
    """`config` without its `vectors_path` values (machine-specific; the vectors are hashed)."""
    if isinstance(config, dict):
        return {
            key: _without_paths(value) for key, value in config.items() if key != "vectors_path"
        }
    if isinstance(config, list):
        return [_without_paths(value) for value in config]
    return config


def bilm_fingerprint(bilm: torch.nn.Module) -> str:
    """A SHA-256 of what an `ElmocBiLm`'s layers depend on besides the input ids."""
    model = bilm.bilm
    digest = hashlib.sha256()
    described = {
        "format": CACHE_FORMAT,
        "input_kind": bilm.input_kind.name,
        "boundaries": bilm.boundary_ids.tolist(),
        "model": _without_paths(bilm.archive.config.get("model", {})),
    }
    digest.update(json.dumps(described, sort_keys=True).encode("utf-8"))
    # Parameters and buffers, not the extra state (a fastText embedder's record holds its path). A
    # biLM prepared for bfloat16 or int8 has the state of its float32 self (its precision is in
    # the cache's name and metadata).
    buffers = {name for name, _ in model.named_buffers()}
    for name, value in sorted(model.state_dict(keep_vars=True).items()):
        if not isinstance(value, torch.nn.Parameter) and name not in buffers:
            continue
        tensor = value.detach().cpu().contiguous()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode("utf-8"))
        digest.update(tensor.numpy().tobytes())
    for name, module in sorted(model.named_modules(), key=lambda pair: pair[0]):
        if callable(getattr(module, "vectors_record", None)):
            digest.update(f"{name}:{module.vectors_record()['fingerprint']}".encode("utf-8"))
    return digest.hexdigest()


def sentence_keys(inputs: torch.Tensor) -> Tuple[List[bytes], List[int]]:
    """Each sentence's key (a SHA-256 of its ids without padding) and word count; 0 is padding."""
    ids = inputs.detach().cpu().numpy()
    present = ids != 0
    lengths = present.any(-1).sum(-1).tolist()
    keys = []
    for row, length in enumerate(lengths):
        columns = numpy.flatnonzero(present[row, :length].any(0))
        width = int(columns[-1]) + 1 if len(columns) else 0
        sentence = numpy.ascontiguousarray(ids[row, :length, :width], dtype="<i8")
        digest = hashlib.sha256(struct.pack("<II", length, width))
        digest.update(sentence.tobytes())
        keys.append(digest.hexdigest().encode("ascii"))
    return keys, lengths


class LayerStore(TensorCache):
    """
    allennlp's `TensorCache` with `(layers, timesteps, dim)` values as raw bytes behind a header,
    batched I/O.
    """

    cache_dtype = "float32"

    def encode(self, value: torch.Tensor) -> bytes:
        array = value.detach().to(CACHE_DTYPES[self.cache_dtype]).cpu().contiguous().numpy()
        payload = array.astype(_NUMPY_DTYPES[self.cache_dtype], copy=False).tobytes()
        layers, timesteps, dim = array.shape
        code = _DTYPE_CODES[self.cache_dtype]
        return (
            _HEADER.pack(_VALUE_MAGIC, code, layers, timesteps, dim, zlib.crc32(payload)) + payload
        )

    def decode(
        self, key: bytes, buffer: Any, expected: Optional[Tuple[int, int, int]] = None
    ) -> numpy.ndarray:
        """The array viewing `buffer`; another layout, shape, size or checksum is refused, naming the entry."""
        problem = None
        if len(buffer) < _HEADER.size:
            problem = "is shorter than its header"
        else:
            magic, code, layers, timesteps, dim, crc = _HEADER.unpack_from(buffer)
            payload = memoryview(buffer)[_HEADER.size :]
            itemsize = _NUMPY_DTYPES[self.cache_dtype].itemsize
            if magic != _VALUE_MAGIC or code != _DTYPE_CODES[self.cache_dtype]:
                problem = f"is not a {self.cache_dtype} layer value"
            elif expected is not None and (layers, timesteps, dim) != expected:
                problem = f"has shape {(layers, timesteps, dim)}, not {expected}"
            elif len(payload) != layers * timesteps * dim * itemsize:
                problem = (
                    f"has {len(payload)} bytes of values, not {layers * timesteps * dim * itemsize}"
                )
            elif zlib.crc32(payload) != crc:
                problem = "fails its checksum"
        if problem is not None:
            raise ConfigurationError(
                f"Layer cache {self.lmdb_env.path()} is damaged: entry {bytes(key).decode('ascii', 'replace')} "
                f"{problem}. Delete the file (and its -lock) to rebuild it."
            )
        return numpy.frombuffer(payload, dtype=_NUMPY_DTYPES[self.cache_dtype]).reshape(
            layers, timesteps, dim
        )

    def read_into(
        self, keys: Sequence[bytes], lengths: Sequence[int], layers: numpy.ndarray
    ) -> List[int]:
        """Copies each stored sentence into its row of `layers` in one transaction; returns the rows not stored."""
        num_layers, _, _, dim = layers.shape
        missing = []
        with self.lmdb_env.begin(write=False, buffers=True) as transaction:
            for row, key in enumerate(keys):
                buffer = transaction.get(key)
                if buffer is None:
                    missing.append(row)
                    continue
                value = self.decode(key, buffer, (num_layers, lengths[row] + 2, dim))
                layers[:, row, : lengths[row] + 2] = value
        return missing

    def read_many(self, keys: Sequence[bytes]) -> List[Optional[bytes]]:
        with self.lmdb_env.begin(write=False) as transaction:
            return [transaction.get(key) for key in keys]

    def write_many(self, items: Dict[bytes, bytes]) -> None:
        """Stores `items`, keeping any value another process stored first."""
        with self.lmdb_env.begin(write=True) as transaction:
            for key, value in items.items():
                transaction.put(key, value, overwrite=False)

    def __getitem__(self, key: str) -> torch.Tensor:
        buffer = self.read_many([key.encode()])[0]
        if buffer is None:
            raise KeyError(key)
        return torch.from_numpy(self.decode(key.encode(), buffer).astype(numpy.float32))

    def __del__(self):
        if getattr(self, "lmdb_env", None) is not None:  # not if opening the file failed
            super().__del__()


def resolve_cache_directories(params: Any) -> List[str]:
    """
    Makes each relative `cache_directory` of a biLM block (a dict with an `archive_file`) in a training
    config (a dict or allennlp `Params`) absolute against the working directory, in place, so that the
    run's `config.json`, and its archive, name the folder it fills wherever the archive is evaluated.
    Returns the paths made absolute.
    """
    resolved = []
    stack = [getattr(params, "params", params)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            directory = node.get("cache_directory")
            if (
                "archive_file" in node
                and isinstance(directory, str)
                and not os.path.isabs(os.path.expanduser(directory))
            ):
                node["cache_directory"] = os.path.abspath(directory)
                resolved.append(node["cache_directory"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    for path in resolved:
        logger.info(
            "Layer cache: cache_directory resolved to %s (recorded so in config.json)", path
        )
    return resolved


class LayerCache:
    """
    The layers of one frozen `ElmocBiLm` per sentence in `directory`, as `cache_dtype`: read where stored,
    else computed and stored until the file reaches `map_size`. Opened at the first batch (weights set).
    """

    def __init__(
        self,
        directory: Union[str, os.PathLike],
        cache_dtype: str = "float32",
        map_size: int = 1 << 40,
    ) -> None:
        if cache_dtype not in CACHE_DTYPES:
            close = difflib.get_close_matches(str(cache_dtype), list(CACHE_DTYPES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigurationError(
                f"cache_dtype must be one of {sorted(CACHE_DTYPES)}, got {cache_dtype!r}{hint}"
            )
        self.directory = Path(directory).expanduser()
        if not self.directory.is_absolute():
            # Training records it absolute (`resolve_cache_directories`): a relative one comes from an
            # older archive, or a model built outside `allennlp train`.
            self.directory = self.directory.absolute()
            logger.warning(
                "Layer cache: cache_directory %s is relative: the biLM's layers are read and stored in %s",
                directory,
                self.directory,
            )
        self.cache_dtype = cache_dtype
        self.map_size = map_size
        self.path: Optional[Path] = None
        self.filling = True
        self._store: Optional[LayerStore] = None
        self.dtype = "float32"  # the biLM's precision (`open`)
        self.hits = 0
        self.misses = 0

    def open(self, bilm: torch.nn.Module, dtype: str = "float32") -> LayerStore:
        """
        The cache file of `bilm` running at `dtype` (`elmoc_allennlp.common.precision`), checked
        against what its metadata says it holds.
        """
        fingerprint = bilm_fingerprint(bilm)
        metadata = {
            "format": CACHE_FORMAT,
            "fingerprint": fingerprint,
            "input_kind": bilm.input_kind.name,
            "num_layers": bilm.num_layers,
            "dim": bilm.get_output_dim(),
            "cache_dtype": self.cache_dtype,
        }
        name = f"elmoc-layers-{fingerprint[:32]}-{self.cache_dtype}"
        if dtype != "float32":  # float32 caches are named and recorded as before precisions
            metadata["dtype"] = dtype
            name += f"-{dtype}"
        self.dtype = dtype
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"{name}.lmdb"
        try:
            store = LayerStore(self.path, map_size=self.map_size)
        except lmdb.Error as error:
            advice = (
                "damaged? Delete the file (and its -lock) to rebuild it"
                if self.path.exists()
                else ("set cache_directory to a folder this user can write")
            )
            raise ConfigurationError(
                f"Layer cache {self.path} cannot be opened ({error}): {advice}."
            ) from None
        store.cache_dtype = self.cache_dtype
        encoded = json.dumps(metadata, sort_keys=True).encode("utf-8")
        recorded = store.read_many([_METADATA_KEY])[0]
        if recorded is None and not store.read_only:
            try:
                store.write_many({_METADATA_KEY: encoded})
            except lmdb.Error as error:
                self._stop_filling(error)
            recorded = store.read_many([_METADATA_KEY])[0]
        if recorded is None and len(store) > 0 or recorded is not None and recorded != encoded:
            try:
                found = json.loads(bytes(recorded)) if recorded is not None else "no record"
            except ValueError:
                found = "an unreadable record"
            raise ConfigurationError(
                f"Layer cache {self.path} holds the layers of another biLM or storage ({found}), "
                f"not of this one ({metadata}); it is not read. Delete it or use another cache_directory."
            )
        if store.read_only and self.filling:
            logger.warning("Layer cache %s is read-only: it is read, not filled", self.path)
            self.filling = False
        stored = max(len(store) - (recorded is not None), 0)
        how = "read and filled" if self.filling else "read only"
        logger.info(
            "Layer cache of the biLM's layers (%s): %s, %s sentences stored, %s",
            self.cache_dtype if dtype == "float32" else f"{self.cache_dtype}, biLM {dtype}",
            self.path,
            f"{stored:,}",
            how,
        )
        return store

    def _stop_filling(self, error: BaseException) -> None:
        if not (
            isinstance(error, lmdb.MapFullError) or any(text in str(error) for text in _NO_SPACE)
        ):
            raise ConfigurationError(
                f"Layer cache {self.path} could not be written: {error}"
            ) from error
        if self.filling:
            logger.warning(
                "Layer cache %s is full (%s): it stops filling; sentences not in it are computed live",
                self.path,
                error,
            )
        self.filling = False

    @staticmethod
    def check_frozen(bilm: torch.nn.Module) -> None:
        """Caching is wrong for a biLM that changes: fine-tuned, or in training mode (dropout)."""
        if bilm.bilm.training:
            raise ConfigurationError(
                "cache_directory: the biLM is in training mode (dropout), so its layers are not "
                "fixed and cannot be cached; remove cache_directory"
            )
        if any(parameter.requires_grad for parameter in bilm.bilm.parameters()):
            raise ConfigurationError(
                "cache_directory: the biLM is fine-tuned (requires_grad), so its layers change and "
                "cannot be cached; remove cache_directory or set requires_grad to false"
            )

    def activations(
        self,
        bilm: torch.nn.Module,
        inputs: torch.Tensor,
        live: Callable[[torch.Tensor], Dict[str, Any]],
    ) -> Dict[str, Any]:
        """
        What `ElmocBiLm.forward(inputs)` returns: stored layers, `live(sub-batch)` for the others
        (then stored).
        """
        self.check_frozen(bilm)
        # Prepared first: its layers (and int8 weights, in the fingerprint) are as it runs.
        running = getattr(bilm, "prepare_dtype", lambda device: "float32")(inputs.device)
        if self._store is None:
            self._store = self.open(bilm, running)
        elif running != self.dtype:  # the same biLM, prepared elsewhere since: not these layers
            raise ConfigurationError(
                f"Layer cache {self.path} holds the layers of the biLM at {self.dtype}, but it now "
                f"runs at {running}; use one precision per LayerCache"
            )
        store = self._store
        keys, lengths = sentence_keys(inputs)
        num_layers, dim = bilm.num_layers, bilm.get_output_dim()
        batch_size, timesteps = inputs.shape[:2]
        # Assembled on the CPU (copied once, from the file), then moved at once.
        stored = torch.zeros((num_layers, batch_size, timesteps + 2, dim), dtype=torch.float)
        missing = store.read_into(keys, lengths, stored.numpy())
        layers = stored.to(inputs.device)
        self.hits += batch_size - len(missing)
        self.misses += len(missing)
        if missing:
            index = torch.tensor(missing, device=inputs.device)
            computed = torch.stack(live(inputs.index_select(0, index))["activations"])
            layers[:, index] = computed.to(layers.dtype)
            if self.filling:
                items = {}
                for position, row in enumerate(missing):
                    items[keys[row]] = store.encode(computed[:, position, : lengths[row] + 2])
                try:
                    store.write_many(items)
                except lmdb.Error as error:
                    self._stop_filling(error)
        mask = get_mask_from_sequence_lengths(
            torch.tensor(lengths, device=inputs.device) + 2, timesteps + 2
        )
        return {"activations": list(layers.unbind(0)), "mask": mask}
