"""
allennlp 2.10 writes its model archive (`archive_model`), the run's `config.json` and
`meta.json` (`Params.to_file`, `Meta.to_file`) and the metrics files (`dump_metrics`) in place.
`install_atomic_allennlp_writes()` wraps those four functions so that they write through
`elmoc_allennlp.common.atomic_files.atomic_path` instead; the wrapped functions produce
byte-for-byte the same files. It is idempotent and is called when this module is imported, so
`--include-package elmoc_allennlp` (or the `.allennlp_plugins` file) is enough: the `allennlp
train` process that builds the archive, including the parent process of a distributed run,
imports the plugin before training. Checkpoints are made atomic by the `elmoc_atomic`
checkpointer (`elmoc_allennlp.training.atomic_checkpointer`), which the pretraining configs use.
"""
import functools
import os
from os import PathLike
from typing import Callable, List, Optional, Union

from elmoc_allennlp.common.atomic_files import atomic_path

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
        with atomic_path(archive_file) as temporary:
            original(
                serialization_dir,
                weights=weights,
                archive_path=temporary,
                include_in_archive=include_in_archive,
            )
        return str(archive_file)

    return _mark(archive_model, original)


def _make_atomic_params_to_file(original: Callable) -> Callable:
    @functools.wraps(original)
    def to_file(self, params_file: str, preference_orders=None) -> None:
        with atomic_path(params_file) as temporary:
            original(self, temporary, preference_orders)

    return _mark(to_file, original)


def _make_atomic_meta_to_file(original: Callable) -> Callable:
    @functools.wraps(original)
    def to_file(self, path) -> None:
        with atomic_path(path) as temporary:
            original(self, temporary)

    return _mark(to_file, original)


def _make_atomic_dump_metrics(original: Callable) -> Callable:
    @functools.wraps(original)
    def dump_metrics(file_path: Optional[str], metrics, log: bool = False) -> None:
        if not file_path:
            original(file_path, metrics, log=log)
            return
        with atomic_path(file_path) as temporary:
            original(temporary, metrics, log=log)

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
