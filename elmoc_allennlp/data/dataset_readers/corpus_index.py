"""
The index of a corpus file: each line's offset, whitespace tokens and line-break bytes
(docs/scale_and_fault_tolerance.md, "The corpus index"). Format (little-endian): `_HEADER`, then
`uint64` offsets of the `n + 1` line starts, `int32` token counts (`-1`: not UTF-8), `uint8` breaks.
"""

import codecs
import hashlib
import logging
import multiprocessing
import os
import struct
import zlib
from array import array
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import CACHE_DIRECTORY
from allennlp.common.tqdm import Tqdm

from elmoc_allennlp.common.atomic_files import atomic_write

logger = logging.getLogger(__name__)

INDEX_SUFFIX = ".elmoc-index"
INDEX_VERSION = 1
DEFAULT_CACHE_DIRECTORY = os.path.join(CACHE_DIRECTORY, "elmoc_corpus_index")
INVALID_LINE = -1

_MAGIC = b"ELMOCIDX"
_HEADER = struct.Struct("<8sIQQq32sI")
_BOM = b"\xef\xbb\xbf"
_PIECE = 1 << 20  # lines are read in pieces of at most this many bytes
_SAMPLE = 4096  # bytes of content sampled at the start, middle and end of a corpus file
_PARALLEL_MIN_BYTES = 64 << 20
_BAR_MIN_BYTES = 16 << 20
# Lines are read in blocks of about this many bytes, and lines closer than _MAX_GAP_BYTES with one read.
_BLOCK_BYTES = 1 << 18
_MAX_GAP_BYTES = 64


class CorpusIndex(NamedTuple):
    """The index of one corpus file (see the module's docstring)."""

    path: str
    offsets: numpy.ndarray  # uint64, number of lines + 1
    tokens: numpy.ndarray  # int32, number of lines; INVALID_LINE: not UTF-8
    breaks: numpy.ndarray  # uint8, number of lines: line-break bytes at the end of each line

    @property
    def num_lines(self) -> int:
        return len(self.tokens)

    def line_bytes(self) -> numpy.ndarray:
        """The length of each line, without its line break."""
        return numpy.diff(self.offsets.astype(numpy.int64)) - self.breaks


class CorpusDecodingError(ConfigurationError):
    """A corpus line that is not valid UTF-8, naming the file, line and byte offset in the line."""

    def __init__(self, path: str, line_number: int, byte_offset: int, reason: str) -> None:
        super().__init__(
            f"{path}, line {line_number}: invalid UTF-8 at byte offset {byte_offset} ({reason})"
        )
        self.path = path
        self.line_number = line_number
        self.byte_offset = byte_offset
        self.reason = reason

    def __reduce__(self):
        # Picklable, as it may be raised in a data-loader worker process.
        return type(self), (self.path, self.line_number, self.byte_offset, self.reason)


class _CorpusKey(NamedTuple):
    size: int
    mtime_ns: int
    sample: bytes


def _stat_key(path: str) -> Tuple[int, int, int, int]:
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev


def _corpus_key(path: str) -> _CorpusKey:
    stat = os.stat(path)
    digest = hashlib.sha256(str(stat.st_size).encode())
    with open(path, "rb") as corpus:
        for start in sorted(
            {0, max(0, stat.st_size // 2 - _SAMPLE // 2), max(0, stat.st_size - _SAMPLE)}
        ):
            corpus.seek(start)
            digest.update(corpus.read(_SAMPLE))
    return _CorpusKey(stat.st_size, stat.st_mtime_ns, digest.digest())


def index_path_beside(path: str) -> str:
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}{INDEX_SUFFIX}")


def index_path_in_cache(path: str, cache_directory: Optional[str] = None) -> str:
    absolute = os.path.abspath(path)
    name = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    file_name = f"{name}-{os.path.basename(absolute)}{INDEX_SUFFIX}"
    return os.path.join(cache_directory or DEFAULT_CACHE_DIRECTORY, file_name)


def _breaks(piece: bytes) -> int:
    return min(255, len(piece) - len(piece.rstrip(b"\r\n")))


def index_lines(path: str) -> Tuple[array, array, array]:
    """Indexes one file: the `(offsets, tokens, breaks)` arrays, streaming (long lines in pieces)."""
    offsets, tokens, breaks = array("Q"), array("i"), array("B")
    with open(path, "rb") as corpus:
        position = 3 if corpus.read(3) == _BOM else 0
        corpus.seek(position)
        offsets.append(position)
        readline = corpus.readline
        while True:
            piece = readline(_PIECE)
            if not piece:
                break
            position += len(piece)
            if len(piece) < _PIECE or piece.endswith(b"\n"):
                try:
                    tokens.append(len(piece.decode("utf-8").split()))
                except UnicodeDecodeError:
                    tokens.append(INVALID_LINE)
                breaks.append(_breaks(piece))
            else:
                count, piece_bytes, end = _count_long_line(piece, readline)
                position += piece_bytes
                tokens.append(count)
                breaks.append(_breaks(end))
            offsets.append(position)
    return offsets, tokens, breaks


def _count_long_line(first: bytes, readline) -> Tuple[int, int, bytes]:
    """A line longer than a piece: its tokens, its other bytes, its last (up to 255, across pieces) bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    count, in_token, valid, more = 0, False, True, 0
    piece, end = first, b""
    while True:
        end = (end + piece[-255:])[-255:]
        last = not piece or len(piece) < _PIECE or piece.endswith(b"\n")
        if valid:
            try:
                text = decoder.decode(piece, final=last)
            except UnicodeDecodeError:
                valid = False
            else:
                words = len(text.split())
                if words and in_token and not text[0].isspace():
                    words -= 1  # the token goes on from the previous piece
                count += words
                if text:
                    in_token = not text[-1].isspace()
        if last:
            return (count if valid else INVALID_LINE), more, end
        piece = readline(_PIECE)
        more += len(piece)


def _build_one(path: str) -> Tuple[str, bytes]:
    """Indexes `path`; the index file's bytes (a top-level function, for process pools)."""
    key = _corpus_key(path)
    offsets, tokens, breaks = index_lines(path)
    if _corpus_key(path) != key:
        raise OSError(f"{path} changed while it was being indexed")
    if struct.pack("=I", 1) != struct.pack("<I", 1):  # big-endian machine: store little-endian
        offsets.byteswap()
        tokens.byteswap()
    payload = offsets.tobytes() + tokens.tobytes() + breaks.tobytes()
    header = _HEADER.pack(
        _MAGIC, INDEX_VERSION, len(tokens), key.size, key.mtime_ns, key.sample, zlib.crc32(payload)
    )
    return path, header + payload


class DamagedIndexError(ValueError):
    """An index file that does not check out."""


def parse_index(data: bytes, corpus_path: str, key: _CorpusKey) -> Optional[CorpusIndex]:
    """The index in an index file's `data`; `None` if stale, `DamagedIndexError` if damaged."""
    if len(data) < _HEADER.size:
        raise DamagedIndexError(f"{len(data)} bytes, shorter than the header")
    magic, version, num_lines, size, mtime_ns, sample, crc = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise DamagedIndexError("not an ELMo-C corpus index")
    if version != INDEX_VERSION or (size, mtime_ns, sample) != key:
        return None
    if num_lines > size:
        raise DamagedIndexError(f"{num_lines} lines in a file of {size} bytes")
    expected = _HEADER.size + 8 * (num_lines + 1) + 5 * num_lines
    if len(data) != expected:
        raise DamagedIndexError(f"{len(data)} bytes where {num_lines} lines take {expected}")
    payload = memoryview(data)[_HEADER.size :]
    if zlib.crc32(payload) != crc:
        raise DamagedIndexError("checksum mismatch")
    offsets = numpy.frombuffer(data, dtype="<u8", count=num_lines + 1, offset=_HEADER.size)
    tokens = numpy.frombuffer(
        data, dtype="<i4", count=num_lines, offset=_HEADER.size + 8 * (num_lines + 1)
    )
    breaks = numpy.frombuffer(
        data, dtype="u1", count=num_lines, offset=_HEADER.size + 12 * num_lines + 8
    )
    lengths = numpy.diff(offsets.astype(numpy.int64))
    if (
        int(offsets[0]) not in (0, 3)
        or int(offsets[-1]) != size
        or (num_lines and lengths.min() < 1)
        or (num_lines and tokens.min() < INVALID_LINE)
        or numpy.any(tokens > lengths)
        or numpy.any(breaks > lengths)
    ):
        raise DamagedIndexError("offsets or token counts outside the corpus file")
    return CorpusIndex(
        corpus_path, offsets.astype(numpy.uint64), tokens.astype(numpy.int32), breaks.copy()
    )


# Indexes loaded by this process (and inherited by forked loader workers), by corpus path.
_LOADED: Dict[str, Tuple[Tuple[int, int, int, int], CorpusIndex]] = {}


def _writable_directory(directory: str) -> bool:
    return os.access(directory, os.W_OK | os.X_OK)


def _load_cached(path: str, cache_directory: Optional[str]) -> Optional[CorpusIndex]:
    key = _corpus_key(path)
    for index_path in (index_path_beside(path), index_path_in_cache(path, cache_directory)):
        try:
            with open(index_path, "rb") as index_file:
                data = index_file.read(_HEADER.size + 13 * (key.size + 1) + 8)
        except OSError:
            continue
        try:
            index = parse_index(data, path, key)
        except DamagedIndexError as error:
            logger.warning("The corpus index %s is damaged (%s): rebuilding it", index_path, error)
            continue
        if index is None:
            logger.info(
                "The corpus index %s is out of date (the corpus file changed): rebuilding it",
                index_path,
            )
            continue
        return index
    return None


def _store(path: str, data: bytes, cache_directory: Optional[str]) -> None:
    candidates = [index_path_beside(path), index_path_in_cache(path, cache_directory)]
    if not _writable_directory(os.path.dirname(candidates[0])):
        candidates = candidates[1:]
    for index_path in candidates:
        try:
            os.makedirs(os.path.dirname(index_path), exist_ok=True)
            with atomic_write(index_path) as index_file:
                index_file.write(data)
            return
        except OSError as error:
            logger.warning("Could not write the corpus index %s (%s)", index_path, error)
    logger.warning("The index of %s is kept in memory only (no writable place for it)", path)


def load_indexes(
    paths: Sequence[str], cache_directory: Optional[str] = None, processes: Optional[int] = None
) -> List[CorpusIndex]:
    """The index of every file in `paths`, loaded or built (by `processes`, default: the CPUs from 64 MB)."""
    found: Dict[str, CorpusIndex] = {}
    for path in dict.fromkeys(paths):
        stat_key = _stat_key(path)
        loaded = _LOADED.get(path)
        index = (
            loaded[1]
            if loaded is not None and loaded[0] == stat_key
            else _load_cached(path, cache_directory)
        )
        if index is not None:
            found[path] = index
            _LOADED[path] = (stat_key, index)
    missing = [path for path in dict.fromkeys(paths) if path not in found]
    if missing:
        found.update(_build(missing, cache_directory, processes))
    return [found[path] for path in paths]


def _build(
    paths: List[str], cache_directory: Optional[str], processes: Optional[int]
) -> Dict[str, CorpusIndex]:
    total = sum(os.path.getsize(path) for path in paths)
    if processes is None:
        processes = (os.cpu_count() or 1) if total >= _PARALLEL_MIN_BYTES else 1
    # Loader workers are daemonic processes, which cannot start others.
    processes = max(1, min(processes, len(paths)))
    if multiprocessing.current_process().daemon:
        processes = 1
    logger.info(
        "Indexing %d corpus file(s), %.1f MB (once; %d process(es))",
        len(paths),
        total / 1e6,
        processes,
    )
    built: Dict[str, CorpusIndex] = {}
    progress = Tqdm.tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        desc="indexing the corpus",
        disable=total < _BAR_MIN_BYTES,
    )

    def finish(path: str, data: bytes) -> None:
        _store(path, data, cache_directory)
        index = parse_index(data, path, _corpus_key(path))
        if index is None:
            raise OSError(f"{path} changed while it was being indexed")
        built[path] = index
        _LOADED[path] = (_stat_key(path), index)
        progress.update(int(index.offsets[-1]))

    try:
        if processes == 1:
            for path in paths:
                finish(*_build_one(path))
        else:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            with context.Pool(processes) as pool:
                for path, data in pool.imap_unordered(_build_one, paths):
                    finish(path, data)
    finally:
        progress.close()
    return built


def read_lines(
    index: CorpusIndex, line_numbers: numpy.ndarray, statistics=None
) -> Iterator[Tuple[int, bytes]]:
    """`(line, raw line without its break)` of the 0-based `line_numbers`, in order; `statistics` counts reads."""
    if not len(line_numbers):
        return
    offsets = index.offsets.astype(numpy.int64)
    sizes = offsets[line_numbers + 1] - offsets[line_numbers]
    # A block ends after the line at which its bytes reach _BLOCK_BYTES.
    block_ends = (numpy.flatnonzero(numpy.diff(numpy.cumsum(sizes) // _BLOCK_BYTES)) + 1).tolist()
    block_ends.append(len(line_numbers))
    with open(index.path, "rb", buffering=0) as corpus:
        descriptor = corpus.fileno()
        if statistics is not None:
            statistics.files += 1
        block_start = 0
        for block_end in block_ends:
            if block_end <= block_start:
                continue
            block = line_numbers[block_start:block_end]
            block_start = block_end
            ordered = numpy.sort(block)
            begins, ends = offsets[ordered], offsets[ordered + 1]
            run_starts = numpy.flatnonzero(begins[1:] - ends[:-1] > _MAX_GAP_BYTES) + 1
            run_bounds = [0] + run_starts.tolist() + [len(ordered)]
            # Memory views give Python ints: numpy's scalars would cost more than the line.
            numbers, text_ends = memoryview(ordered), memoryview(ends - index.breaks[ordered])
            begins, ends = memoryview(begins), memoryview(ends)
            raw: Dict[int, bytes] = {}
            for run_start, run_end in zip(run_bounds, run_bounds[1:]):
                low, high = begins[run_start], ends[run_end - 1]
                data = os.pread(descriptor, high - low, low)
                while len(data) < high - low:
                    more = os.pread(descriptor, high - low - len(data), low + len(data))
                    if not more:
                        raise ConfigurationError(
                            f"{index.path} is shorter than when it was indexed"
                        )
                    data += more
                if statistics is not None:
                    statistics.bytes += len(data)
                for position in range(run_start, run_end):
                    raw[numbers[position]] = data[
                        begins[position] - low : text_ends[position] - low
                    ]
                del data
            for line in block.tolist():
                yield line, raw[line]


def decoding_error(index: CorpusIndex, line: int) -> CorpusDecodingError:
    """The error of line `line` (0-based) of an indexed file, which its index marks not UTF-8."""
    ((_, raw_line),) = read_lines(index, numpy.array([line]))
    try:
        raw_line.decode("utf-8")
    except UnicodeDecodeError as error:
        return CorpusDecodingError(index.path, line + 1, error.start, error.reason)
    return CorpusDecodingError(index.path, line + 1, 0, "the corpus changed after it was indexed")
