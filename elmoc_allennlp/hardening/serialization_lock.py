"""
A serialization folder of the plugin's runs has one writer at a time.
Problem (allennlp 2.10.1): nothing stops two `allennlp train` runs writing one folder (`--force`
while another writes it packs one run's config with the other's weights; two `--recover` runs).
Workaround: `create_serialization_dir` takes the folder's `common.writer_lock.WriterLock` (an
`flock` on `.NAME.lock` next to it, released by the kernel when the process dies) before the
folder is made, reused or removed, for a config of the plugin; `train_model` releases it. A second
run is refused naming the folder. Where the parent is not writable (a mount point) the lock is
inside the folder, taken once it exists. To drop it: when allennlp locks the folder itself.
"""
import errno
import functools
import os
from typing import Optional

from elmoc_allennlp.common.writer_lock import FOLDER, HELD_FOLDERS, WriterLock
from elmoc_allennlp.common.shims import install_shim
from elmoc_allennlp.hardening.scope import plugin_config

REPLACES = "a serialization folder of the plugin's runs has one `allennlp train` writer at a time (an flock)"
TARGETS = (
    "allennlp.training.util.create_serialization_dir",
    "allennlp.commands.train.train_model",
)


def _make_create_serialization_dir(original):
    @functools.wraps(original)
    def create_serialization_dir(params, serialization_dir, recover, force):
        folder = os.path.abspath(os.fspath(serialization_dir))
        held = HELD_FOLDERS.get(folder)
        if (held is not None and held.held) or not plugin_config(params):
            return original(params, serialization_dir, recover, force)
        lock = _lock_beside(folder)
        try:
            original(params, serialization_dir, recover, force)
            if lock is None:  # the parent is not writable: lock inside the folder, now there
                lock = WriterLock(folder, FOLDER, inside=True).acquire()
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        HELD_FOLDERS[folder] = lock

    return create_serialization_dir


def _lock_beside(folder: str) -> Optional[WriterLock]:
    """The folder's lock, next to it (its parent made as `create_serialization_dir` would), or
    `None` where the parent is not writable."""
    parent = os.path.dirname(folder)
    try:
        os.makedirs(parent, exist_ok=True)
        return WriterLock(folder, FOLDER).acquire()
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and os.path.isdir(folder):
            return None
        raise


def _make_train_model(original):
    @functools.wraps(original)
    def train_model(params, serialization_dir, *args, **kwargs):
        folder = os.path.abspath(os.fspath(serialization_dir))
        already = folder in HELD_FOLDERS
        try:
            return original(params, serialization_dir, *args, **kwargs)
        finally:
            if not already and folder in HELD_FOLDERS:
                HELD_FOLDERS.pop(folder).release()

    return train_model


def install() -> bool:
    import allennlp.commands.train as train_command
    import allennlp.training.util as training_util

    install_shim(training_util, "create_serialization_dir", _make_create_serialization_dir)
    install_shim(train_command, "train_model", _make_train_model)
    return True
