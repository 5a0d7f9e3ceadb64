"""
`allennlp train` of the plugin's runs writes `model.tar.gz` and `config.json` atomically.
Problem (allennlp 2.10.1): both are written in place (`archive_model`, `Params.to_file`): a kill
mid-write leaves a truncated archive, or a `config.json` that `--recover` cannot read. In a
distributed run the parent process, which builds no component, writes both. Workaround: allennlp's
functions write a temporary file renamed into place (`atomic_path`), for a run or config of the
plugin (`scope.plugin_run`, `plugin_config`). To drop it: when allennlp writes them atomically.
"""
import functools
import os
from os import PathLike
from typing import Callable, List, Optional, Union

from elmoc_allennlp.common.atomic_files import atomic_path
from elmoc_allennlp.common.shims import install_shim
from elmoc_allennlp.hardening.scope import plugin_config, plugin_run

REPLACES = "`allennlp train` of the plugin's runs writes model.tar.gz and config.json atomically"
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
        if not plugin_run(serialization_dir):
            return original(serialization_dir, weights, archive_path, include_in_archive)
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

    return archive_model


def _make_atomic_params_to_file(original: Callable) -> Callable:
    @functools.wraps(original)
    def to_file(self, params_file: str, preference_orders=None) -> None:
        if not plugin_config(self):
            return original(self, params_file, preference_orders)
        with atomic_path(params_file) as temporary:
            original(self, temporary, preference_orders)

    return to_file


def install() -> bool:
    import allennlp.commands.train as train_command
    from allennlp.common.params import Params

    install_shim(train_command, "archive_model", _make_atomic_archive_model)
    install_shim(Params, "to_file", _make_atomic_params_to_file)
    return True
