"""
A serialization folder has one writer at a time.

**Problem (allennlp 2.10.1).** Nothing stops two `allennlp train` runs writing one folder:
`--force` while another run writes it (both exit 0, and `model.tar.gz` packs one run's config with
the other's weights), or two `--recover` runs training side by side into one log.

**Workaround.** `install()` wraps `allennlp.training.util.create_serialization_dir` so that it
takes the folder's `common.writer_lock.WriterLock` (an `flock` the kernel releases when the
process dies) before it removes or reuses anything, and holds it once the folder exists; the
wrapped `allennlp.commands.train.train_model` releases it when training returns. A second run is
refused with a `WriterLockError` naming the folder.

**To drop it**: when allennlp locks the serialization folder itself, remove this module and its
entry in `elmoc_allennlp.compat.SHIMS`.
"""
import functools
import os

from elmoc_allennlp.common.writer_lock import FOLDER, FOLDER_LOCK_NAME, HELD_FOLDERS, WriterLock

REPLACES = "a serialization folder has one `allennlp train` writer at a time (an flock)"
TARGETS = (
    "allennlp.training.util.create_serialization_dir",
    "allennlp.commands.train.train_model",
)


def _make_create_serialization_dir(original):
    @functools.wraps(original)
    def create_serialization_dir(params, serialization_dir, recover, force):
        folder = os.path.abspath(os.fspath(serialization_dir))
        held = HELD_FOLDERS.get(folder)
        if held is not None and os.path.exists(held.path):
            return original(params, serialization_dir, recover, force)
        before = None
        if os.path.isdir(folder):
            # Before `--force` removes anything; the lock file would make an empty folder
            # non-empty, so it is only taken where one exists.
            if os.path.exists(os.path.join(folder, FOLDER_LOCK_NAME)):
                before = WriterLock(folder, FOLDER).acquire()
        try:
            original(params, serialization_dir, recover, force)
            if before is not None and os.path.exists(before.path):
                HELD_FOLDERS[folder] = before
            else:
                HELD_FOLDERS[folder] = WriterLock(folder, FOLDER).acquire()
                if before is not None:
                    before.release()
        except BaseException:
            if before is not None and HELD_FOLDERS.get(folder) is not before:
                before.release()
            raise

    create_serialization_dir._elmoc_locked = True  # type: ignore[attr-defined]
    return create_serialization_dir


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

    train_model._elmoc_locked = True  # type: ignore[attr-defined]
    return train_model


def install() -> bool:
    import allennlp.commands.train as train_command
    import allennlp.training.util as training_util

    if not getattr(training_util.create_serialization_dir, "_elmoc_locked", False):
        training_util.create_serialization_dir = _make_create_serialization_dir(
            training_util.create_serialization_dir
        )
    if not getattr(train_command.train_model, "_elmoc_locked", False):
        train_command.train_model = _make_train_model(train_command.train_model)
    return True
