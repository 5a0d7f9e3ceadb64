"""One writer per output: an exclusive `flock` on a lock file the kernel releases (docs/trust_and_safety.md)."""

import contextlib
import errno
import fcntl
import logging
import os
from typing import Dict, Optional, Union

from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

# `flock` errors: another process holds the lock; the file system has no `flock`.
_HELD_ELSEWHERE = {errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES}
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}

# The lock file inside a serialization folder whose parent folder is not writable.
FOLDER_LOCK_NAME = ".elmoc-writer.lock"


class WriterLockError(ConfigurationError):
    """Another process is writing the same output."""

    def __init__(self, output: str, what: str, lock_file: str) -> None:
        self.output = output
        super().__init__(
            f"Another process is writing {what} {output} (it holds {lock_file}); "
            "wait for it to finish or choose another output. The lock goes when that process "
            "ends, however it ends."
        )


def lock_path_of(output: str, inside: bool = False) -> str:
    """The lock file of a file or folder: `.NAME.lock` next to it, or with `inside`, `FOLDER_LOCK_NAME` in it."""
    if inside:
        return os.path.join(output, FOLDER_LOCK_NAME)
    directory, name = os.path.split(output)
    return os.path.join(directory, f".{name}.lock")


FOLDER = "the serialization folder"
FILE = "the output file"


class WriterLock:
    """
    The exclusive lock of `output` from `acquire()` to `release()` or the end of the process.

    # Parameters

    output : `str`
        The folder or file written (its folder must exist).
    what : `str`, optional (default = `FILE`)
        How errors call it: `FOLDER` or `FILE`.
    inside : `bool`, optional (default = `False`)
        Lock a folder with a file inside it (`FOLDER_LOCK_NAME`) rather than next to it.
    """

    def __init__(
        self, output: Union[str, os.PathLike], what: str = FILE, inside: bool = False
    ) -> None:
        self.output = os.path.abspath(os.fspath(output))
        self.what = what
        self.path = lock_path_of(self.output, inside)
        self._descriptor: Optional[int] = None

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def acquire(self) -> "WriterLock":
        """Takes the lock, or raises `WriterLockError` if another process holds it."""
        if self._descriptor is not None:
            return self
        for _ in range(10):
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(descriptor)
                if error.errno in _HELD_ELSEWHERE:
                    raise WriterLockError(self.output, self.what, self.path) from None
                if error.errno in _NO_FLOCK:
                    return self._unlocked(error)
                raise
            # Ours only if the name still leads to the file locked (the last holder removes it).
            try:
                same = os.stat(self.path).st_ino == os.fstat(descriptor).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._descriptor = descriptor
                os.ftruncate(descriptor, 0)
                os.write(descriptor, f"{os.getpid()}\n".encode())
                return self
            os.close(descriptor)
        raise WriterLockError(self.output, self.what, self.path)

    def _unlocked(self, error: OSError) -> "WriterLock":
        """No lock where the file system has no `flock`: a warning naming the output, and on."""
        with contextlib.suppress(OSError):
            os.remove(self.path)
        logger.warning(
            "Cannot lock %s %s: its file system does not support flock (%s); a second writer would not be refused",
            self.what,
            self.output,
            os.strerror(error.errno),
        )
        return self

    def release(self) -> None:
        """Removes the lock file and releases the lock (the removal first: see `acquire`)."""
        if self._descriptor is None:
            return
        with contextlib.suppress(OSError):
            # Not a newer lock file of the same name (`--force` removes the folder it was in).
            if os.stat(self.path).st_ino == os.fstat(self._descriptor).st_ino:
                os.remove(self.path)
        os.close(self._descriptor)
        self._descriptor = None

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# Serialization folders whose lock this process holds (absolute path -> lock).
HELD_FOLDERS: Dict[str, WriterLock] = {}
