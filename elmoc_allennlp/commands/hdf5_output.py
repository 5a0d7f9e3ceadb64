"""The hdf5 file `elmoc-embed` writes, safe from a failed write and from signals inside HDF5."""

import io
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from elmoc_allennlp.common.disk_full import disk_full_error, find_disk_full


class HDF5Output(io.RawIOBase):
    """
    The temporary output file for h5py's `fileobj` driver, such that a failed write never reaches
    HDF5 (through h5py 3.16 one leaves it broken: closing fails, the process segfaults at exit):
    the first failed write is kept in `error`, later writes go to memory, and `check` raises it
    naming the output. Writes are complete (`pwrite` until done: the driver ignores a short count).
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.error: Optional[OSError] = None
        self._descriptor = os.open(path, os.O_RDWR)
        self._position = 0
        self._size = os.fstat(self._descriptor).st_size  # as HDF5 sees it
        self._on_disk = self._size  # the bytes of the file that hold what HDF5 wrote there
        self._in_memory: List[Tuple[int, bytes]] = []  # (offset, data) written after `error`

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer) -> int:
        # The driver ignores the count: the whole buffer is filled, with zeros past the end.
        view = memoryview(buffer).cast("B")
        size = len(view)
        on_disk = max(0, min(size, self._on_disk - self._position))
        done = 0
        while done < on_disk:
            try:
                data = os.pread(self._descriptor, on_disk - done, self._position + done)
            except OSError as error:
                self.error = self.error or error
                break
            if not data:
                break
            view[done : done + len(data)] = data
            done += len(data)
        view[done:] = bytes(size - done)
        for start, data in self._in_memory:
            low, high = max(start, self._position), min(start + len(data), self._position + size)
            if low < high:
                view[low - self._position : high - self._position] = data[
                    low - start : high - start
                ]
        self._position += size
        return size

    def write(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while self.error is None and done < len(view):
            try:
                done += os.pwrite(self._descriptor, view[done:], self._position + done)
            except OSError as error:
                self.error = error
        if self.error is None:
            self._on_disk = max(self._on_disk, self._position + len(view))
        else:
            self._in_memory.append((self._position, bytes(view)))
        self._position += len(view)
        self._size = max(self._size, self._position)
        return len(view)

    def truncate(self, size: Optional[int] = None) -> int:
        size = self._position if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self._descriptor, size)
                self._on_disk = size
            except OSError as error:  # EFBIG: growing past `ulimit -f`
                self.error = error
        self._on_disk = min(self._on_disk, size)
        self._in_memory = [(at, data[: size - at]) for at, data in self._in_memory if at < size]
        self._size = size
        return size

    def close(self) -> None:
        if not self.closed:
            os.close(self._descriptor)
        super().close()

    def check(self, output_path: Path) -> None:
        """Raises the first failed write as an error naming `output_path`, if one failed."""
        if self.error is None:
            return
        if find_disk_full(self.error) is not None:
            raise disk_full_error(output_path, self.error)
        raise OSError(
            self.error.errno,
            f"{self.error.strerror} while writing {output_path}; nothing of it was kept",
        )


class HeldSignals:
    """
    SIGINT (`KeyboardInterrupt`) and SIGTERM (`SystemExit(143)`) held while HDF5 runs (an exception
    there breaks it as a failed write does), raised `outside_hdf5` or at `deliver`.
    """

    def __init__(self) -> None:
        self._previous = {}
        self._held: Optional[int] = None
        self._outside = False

    def __enter__(self) -> "HeldSignals":
        if threading.current_thread() is threading.main_thread():
            signals = [signal.SIGTERM]
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signals.append(signal.SIGINT)
            for number in signals:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exception) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)

    def _handle(self, number, frame) -> None:
        if self._held is None:
            self._held = number
        if self._outside:
            self.deliver()

    def deliver(self) -> None:
        """Raises for the signal held, if one arrived."""
        number, self._held = self._held, None
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        if number is not None:
            raise SystemExit(128 + number)

    @contextmanager
    def outside_hdf5(self) -> Iterator[None]:
        """A block that runs no HDF5 code: a signal raises at once."""
        self.deliver()
        self._outside = True
        try:
            yield
        finally:
            self._outside = False
