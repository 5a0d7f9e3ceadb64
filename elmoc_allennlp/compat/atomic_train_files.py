"""
`allennlp train` writes `model.tar.gz` and `config.json` atomically.

**Problem (allennlp 2.10.1).** `allennlp train` writes `model.tar.gz` (`archive_model`) and
`config.json` (`Params.to_file`) in place: a kill mid-write leaves a truncated archive, or a
`config.json` that `--recover` cannot read. In a distributed run the parent process writes both,
and it builds none of the project's components, so this must hold at import.

**Workaround.** `install()` wraps the `archive_model` that `allennlp.commands.train` calls and
`Params.to_file` so that allennlp's own functions write a temporary file that is renamed into
place (`atomic_path`).

**To drop it**: when allennlp writes these files atomically, remove this module and its entry in
`elmoc_allennlp.compat.SHIMS`.
"""
import functools
import os
from os import PathLike
from typing import Callable, List, Optional, Union

from elmoc_allennlp.common.atomic_files import atomic_path

REPLACES = "`allennlp train` writes model.tar.gz and config.json atomically"
TARGETS = ("allennlp.commands.train.archive_model", "allennlp.common.params.Params.to_file")


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
        with atomic_path(archive_file) as temporary:
            original(
                serialization_dir,
                weights=weights,
                archive_path=temporary,
                include_in_archive=include_in_archive,
            )
        return str(archive_file)

    archive_model._elmoc_atomic_original = original  # type: ignore[attr-defined]
    return archive_model


def _make_atomic_params_to_file(original: Callable) -> Callable:
    @functools.wraps(original)
    def to_file(self, params_file: str, preference_orders=None) -> None:
        with atomic_path(params_file) as temporary:
            original(self, temporary, preference_orders)

    to_file._elmoc_atomic_original = original  # type: ignore[attr-defined]
    return to_file


def install() -> bool:
    import allennlp.commands.train as train_command
    from allennlp.common.params import Params

    if not hasattr(train_command.archive_model, "_elmoc_atomic_original"):
        train_command.archive_model = _make_atomic_archive_model(train_command.archive_model)
    if not hasattr(Params.to_file, "_elmoc_atomic_original"):
        Params.to_file = _make_atomic_params_to_file(Params.to_file)  # type: ignore[assignment]
    return True
