"""
`allennlp train` writes the files of a run that are read back, the model archive and the run's
`config.json`, atomically.

**Problem (allennlp 2.10.1).** `allennlp train` writes `model.tar.gz` (`archive_model`, at the end
of training or when interrupted) and `config.json` (`Params.to_file`, at every start, including
`--recover`) in place. A process killed during either write (`kill -9`, pre-emption, out of
memory) leaves a truncated archive that looks like the run's result, or replaces the previous
good one with a truncated one; or a truncated `config.json`, which the next `--recover` cannot
parse, so the run's checkpoints can no longer be resumed.

**Workaround.** `install()` wraps the `archive_model` that `allennlp.commands.train` calls
(`allennlp.models.archive_model` itself stays allennlp's) and `Params.to_file` (which allennlp
calls only for that `config.json`) so that they write through
`elmoc_allennlp.common.atomic_files.atomic_path`: allennlp's own function writes a temporary file
next to the destination, which is renamed into place; the files are byte-for-byte the same.
It is installed at import because in a distributed run both files are written by the parent
process, which builds none of the project's components.

The other files of a run need no replacement of allennlp: checkpoints are written atomically by
the project's `elmoc_atomic` checkpointer; `meta.json` and the metrics files are only written,
never read back, and `--recover` writes them again (`meta.json` at every start, an epoch's
`metrics_epoch_N.json` before that epoch's final checkpoint, `metrics.json` at the end).

**To drop it**: if an allennlp release writes these files atomically, remove this module and its
entry in `elmoc_allennlp.compat.SHIMS`.
"""
import functools
import os
from os import PathLike
from typing import Callable, List, Optional, Union

from elmoc_allennlp.common.atomic_files import atomic_path

REPLACES = "`allennlp train` writes model.tar.gz and config.json atomically"
TARGETS = ("allennlp.commands.train.archive_model", "allennlp.common.params.Params.to_file")


def _mark(wrapper: Callable, original: Callable) -> Callable:
    wrapper._elmoc_atomic_original = original  # type: ignore[attr-defined]
    return wrapper


def _is_wrapped(function: Callable) -> bool:
    return hasattr(function, "_elmoc_atomic_original")


def _make_atomic_archive_model(original: Callable) -> Callable:
    from allennlp.models.archival import _DEFAULT_WEIGHTS

    from elmoc_allennlp.common.portable_bilm import with_carried_bilms

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
        with atomic_path(archive_file) as temporary:
            original(
                serialization_dir,
                weights=weights,
                archive_path=temporary,
                # The biLM config a downstream ELMo-C model carries (common/portable_bilm.py).
                include_in_archive=with_carried_bilms(serialization_dir, include_in_archive),
            )
        return str(archive_file)

    return _mark(archive_model, original)


def _make_atomic_params_to_file(original: Callable) -> Callable:
    @functools.wraps(original)
    def to_file(self, params_file: str, preference_orders=None) -> None:
        with atomic_path(params_file) as temporary:
            original(self, temporary, preference_orders)

    return _mark(to_file, original)


def install() -> bool:
    """
    Wraps `allennlp.commands.train.archive_model` and `Params.to_file`. Idempotent.
    """
    import allennlp.commands.train as train_command
    from allennlp.common.params import Params

    if not _is_wrapped(train_command.archive_model):
        train_command.archive_model = _make_atomic_archive_model(train_command.archive_model)
    if not _is_wrapped(Params.to_file):
        Params.to_file = _make_atomic_params_to_file(Params.to_file)  # type: ignore[assignment]
    return True
