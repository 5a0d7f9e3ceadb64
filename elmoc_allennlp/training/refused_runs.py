"""A run refused before it trained leaves no serialization folder behind: allennlp's `train_model` makes the
folder (config, logs, vocabulary) before it builds the model, and a rerun would then be refused as a
non-empty folder ("use --recover") though nothing was trained."""

import logging
import os
import shutil
from typing import FrozenSet, Optional

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import CARRIED_DIRECTORY
from elmoc_allennlp.common.writer_lock import FOLDER_LOCK_NAME

logger = logging.getLogger(__name__)

# How a config is refused: allennlp's and the plugin's checks, and a constructor's unknown argument.
REFUSALS = (ConfigurationError, TypeError)

# What `train_model` writes before training (with the copy of each biLM a downstream model carries): nothing
# of a trained model.
WRITTEN_BEFORE_TRAINING = frozenset(
    {
        "config.json",
        "meta.json",
        "out.log",
        "stderr.log",
        "vocabulary",
        CARRIED_DIRECTORY,
        FOLDER_LOCK_NAME,
    }
)


def folder_before_run(serialization_dir: "os.PathLike[str] | str") -> Optional[FrozenSet[str]]:
    """The names in the folder before a run (`None`: no folder), for `remove_refused_run`."""
    folder = os.fspath(serialization_dir)
    if not os.path.isdir(folder):
        return None
    return frozenset(os.listdir(folder))


def remove_refused_run(
    serialization_dir: "os.PathLike[str] | str",
    before: Optional[FrozenSet[str]],
    error: BaseException,
) -> bool:
    """
    After `error` ended a run: if it is a refused config (`REFUSALS`), the folder was new or
    empty before the run, and it holds only what `train_model` writes before training, removes the folder
    (an empty one that existed is emptied). Returns whether it did.
    """
    folder = os.fspath(serialization_dir)
    if not isinstance(error, REFUSALS) or before or not os.path.isdir(folder):
        return False
    left = set(os.listdir(folder))
    if not left <= WRITTEN_BEFORE_TRAINING:
        return False
    if before is None:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        for name in left:
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
    logger.info(
        "Refused before training: removed what the run had made of %s (%s)",
        folder,
        ", ".join(sorted(left)),
    )
    return True
