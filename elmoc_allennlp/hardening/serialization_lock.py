"""A serialization folder of the plugin's runs has one `allennlp train` writer at a time: its
`WriterLock`, from before the folder is made, reused or removed to the end of `train_model`."""

import errno
import os

from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.common.writer_lock import FOLDER, HELD_FOLDERS, WriterLock
from elmoc_allennlp.downstream.layer_cache import resolve_cache_directories
from elmoc_allennlp.hardening.scope import plugin_config
from elmoc_allennlp.training.refused_runs import folder_before_run, remove_refused_run

REPLACES = "a serialization folder of the plugin's runs has one `allennlp train` writer at a time (an flock)"


def _create_serialization_dir(original, params, serialization_dir, recover, force):
    folder = os.path.abspath(os.fspath(serialization_dir))
    held = HELD_FOLDERS.get(folder)
    if (held is not None and held.held) or not plugin_config(params):
        return original(params, serialization_dir, recover, force)
    try:  # the lock next to the folder (its parent made as allennlp would), if the parent is writable
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        lock = WriterLock(folder, FOLDER).acquire()
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or not os.path.isdir(folder):
            raise
        lock = None
    try:
        original(params, serialization_dir, recover, force)
        lock = (
            lock or WriterLock(folder, FOLDER, inside=True).acquire()
        )  # inside the folder, now there
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    HELD_FOLDERS[folder] = lock


def _train_model(original, params, serialization_dir, *args, **kwargs):
    folder = os.path.abspath(os.fspath(serialization_dir))
    already = folder in HELD_FOLDERS
    plugin = not already and plugin_config(params)
    if plugin:
        resolve_cache_directories(params)
    before = folder_before_run(folder)
    try:
        return original(params, serialization_dir, *args, **kwargs)
    except BaseException as error:
        if plugin:
            remove_refused_run(folder, before, error)
        raise
    finally:
        if not already and folder in HELD_FOLDERS:
            HELD_FOLDERS.pop(folder).release()


TARGETS, install = installer(
    {
        "allennlp.training.util.create_serialization_dir": _create_serialization_dir,
        "allennlp.commands.train.train_model": _train_model,
    }
)
