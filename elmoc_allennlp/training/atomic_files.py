"""
Crash-safe file writing for training runs: every file is written under a temporary name in its
destination directory, flushed to disk, and renamed into place (`os.replace`, atomic on POSIX
file systems). A process killed at any point (`kill -9`, a pre-empted node, an out-of-memory
kill) leaves either the old file or the complete new one, never a half-written one; at worst a
hidden `.NAME.partial-*` file is left behind, which `remove_stale_partial_files` deletes.

allennlp 2.10 writes its model archive (`archive_model`), the run's `config.json` and
`meta.json` (`Params.to_file`, `Meta.to_file`) and the metrics files (`dump_metrics`) in place.
`install_atomic_allennlp_writes()` wraps those four functions so that they write through
`atomic_write` instead; the wrapped functions produce byte-for-byte the same files. It is
idempotent and is called when this module is imported, so `--include-package elmoc_allennlp`
(or the `.allennlp_plugins` file) is enough: the `allennlp train` process that builds the
archive, including the parent process of a distributed run, imports the plugin before training.
Checkpoints are made atomic by the `elmoc_atomic` checkpointer
(`elmoc_allennlp.training.atomic_checkpointer`), which the pretraining configs use.
"""
import contextlib
import functools
import glob
import logging
import os
import tempfile
from os import PathLike
from typing import IO, Any, Callable, Iterator, List, Optional, Union

import torch

logger = logging.getLogger(__name__)

PARTIAL_MARKER = ".partial-"


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# mkstemp creates files readable by their owner only; the final files get the usual mode.
_FILE_MODE = 0o666 & ~_current_umask()


def _fsync_directory(directory: str) -> None:
    # Makes the rename itself durable; not supported on every platform/file system.
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def partial_path(path: Union[str, PathLike]) -> str:
    """
    A fresh temporary name next to `path`: `.NAME.partial-XXXXXXXX` (hidden, so that no glob
    such as `model_state_e*_b*.th` or `*.tar.gz` ever matches it).
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}{PARTIAL_MARKER}")
    os.close(handle)
    os.chmod(temporary, _FILE_MODE)
    return temporary


def commit_partial(temporary: str, path: Union[str, PathLike]) -> None:
    """Flushes `temporary` to disk and renames it to `path` (atomically replacing it)."""
    path = os.fspath(path)
    with open(temporary, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_directory(os.path.dirname(os.path.abspath(path)))


@contextlib.contextmanager
def atomic_write(path: Union[str, PathLike], mode: str = "wb") -> Iterator[IO[Any]]:
    """
    Opens a temporary file next to `path` for writing; when the block ends without an exception
    the file is flushed, synced and renamed to `path`. On an exception the temporary file is
    deleted and `path` is left as it was.

    # Parameters

    path : `Union[str, PathLike]`
        The destination.
    mode : `str`, optional (default = `"wb"`)
        `"wb"` or `"w"` (text, UTF-8).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write supports modes 'w' and 'wb', got {mode!r}")
    temporary = partial_path(path)
    try:
        encoding = None if "b" in mode else "utf-8"
        with open(temporary, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        _fsync_directory(os.path.dirname(os.path.abspath(os.fspath(path))))
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def atomic_torch_save(obj: Any, path: Union[str, PathLike]) -> None:
    """`torch.save(obj, path)`, atomically."""
    with atomic_write(path, "wb") as handle:
        torch.save(obj, handle)


def remove_stale_partial_files(directory: Union[str, PathLike]) -> List[str]:
    """
    Deletes the temporary files that writers killed mid-write left in `directory` (not in its
    subdirectories) and returns their paths. Only call it when nothing else is writing there.
    """
    removed = []
    for path in glob.glob(os.path.join(glob.escape(os.fspath(directory)), f".*{PARTIAL_MARKER}*")):
        try:
            os.remove(path)
            removed.append(path)
        except OSError:
            pass
    if removed:
        logger.info("Removed %d partially written file(s) in %s", len(removed), directory)
    return removed


# ---------------------------------------------------------------------------------------------
# allennlp's in-place writers, made atomic.


def _mark(wrapper: Callable, original: Callable) -> Callable:
    wrapper._elmoc_atomic_original = original  # type: ignore[attr-defined]
    return wrapper


def _is_wrapped(function: Callable) -> bool:
    return hasattr(function, "_elmoc_atomic_original")


def _make_atomic_archive_model(original: Callable) -> Callable:
    from allennlp.models.archival import _DEFAULT_WEIGHTS

    @functools.wraps(original)
    def archive_model(
        serialization_dir: Union[str, PathLike],
        weights: str = _DEFAULT_WEIGHTS,
        archive_path: Optional[Union[str, PathLike]] = None,
        include_in_archive: Optional[List[str]] = None,
    ) -> str:
        # Same destination rules as allennlp's archive_model.
        if archive_path is not None:
            archive_file = os.fspath(archive_path)
            if os.path.isdir(archive_file):
                archive_file = os.path.join(archive_file, "model.tar.gz")
        else:
            archive_file = os.path.join(os.fspath(serialization_dir), "model.tar.gz")
        temporary = partial_path(archive_file)
        try:
            original(
                serialization_dir,
                weights=weights,
                archive_path=temporary,
                include_in_archive=include_in_archive,
            )
            commit_partial(temporary, archive_file)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)
        return str(archive_file)

    return _mark(archive_model, original)


def _make_atomic_params_to_file(original: Callable) -> Callable:
    @functools.wraps(original)
    def to_file(self, params_file: str, preference_orders=None) -> None:
        temporary = partial_path(params_file)
        try:
            original(self, temporary, preference_orders)
            commit_partial(temporary, params_file)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)

    return _mark(to_file, original)


def _make_atomic_meta_to_file(original: Callable) -> Callable:
    @functools.wraps(original)
    def to_file(self, path) -> None:
        temporary = partial_path(path)
        try:
            original(self, temporary)
            commit_partial(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)

    return _mark(to_file, original)


def _make_atomic_dump_metrics(original: Callable) -> Callable:
    @functools.wraps(original)
    def dump_metrics(file_path: Optional[str], metrics, log: bool = False) -> None:
        if not file_path:
            original(file_path, metrics, log=log)
            return
        temporary = partial_path(file_path)
        try:
            original(temporary, metrics, log=log)
            commit_partial(temporary, file_path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)

    return _mark(dump_metrics, original)


def install_atomic_allennlp_writes() -> None:
    """
    Makes allennlp's `archive_model` (as `allennlp.models.archive_model`,
    `allennlp.models.archival.archive_model` and the name `allennlp train` calls),
    `Params.to_file`, `Meta.to_file` and `allennlp.common.util.dump_metrics` write atomically.
    Idempotent; called when this module is imported.
    """
    import allennlp.commands.train as train_command
    import allennlp.common.util as common_util
    import allennlp.models as models_package
    import allennlp.models.archival as archival
    from allennlp.common.meta import Meta
    from allennlp.common.params import Params

    if not _is_wrapped(archival.archive_model):
        archival.archive_model = _make_atomic_archive_model(archival.archive_model)
    for module in (models_package, train_command):
        if not _is_wrapped(module.archive_model):
            module.archive_model = archival.archive_model
    if not _is_wrapped(Params.to_file):
        Params.to_file = _make_atomic_params_to_file(Params.to_file)  # type: ignore[assignment]
    if not _is_wrapped(Meta.to_file):
        Meta.to_file = _make_atomic_meta_to_file(Meta.to_file)  # type: ignore[assignment]
    if not _is_wrapped(common_util.dump_metrics):
        common_util.dump_metrics = _make_atomic_dump_metrics(common_util.dump_metrics)


install_atomic_allennlp_writes()
