"""
A run's model archive carries what its ELMo-C components need elsewhere.

**Problem (allennlp 2.10.1).** `allennlp train` archives `config.json`, the weights, the vocabulary
and the config's `include_in_archive`, and nothing lets a component add files: a downstream
model's copy of its biLM (`elmoc_bilm/`, see `downstream/archive.py`) and the place where each
fastText file of the config really is (a relative `vectors_path` means nothing in another working
directory) would stay behind.

**Workaround.** `install()` wraps the `archive_model` that `allennlp.commands.train` calls: for a
run whose config uses the plugin's components (`hardening.scope.plugin_run`), before allennlp's
archiving it records every existing fastText file's absolute path and fingerprint in
`elmoc_fasttext.json` (`common/fasttext_location.py`) and adds that file and the `elmoc_bilm`
folder to `include_in_archive`. Other runs are archived by allennlp's function, untouched. Why
process-wide: `archive_model` is called by the `train` command after the model is gone, with the
serialization folder only, in the parent process of a distributed run too.

**To drop it**: when allennlp lets components name files for the archive, register these there,
remove this module and its entry in `elmoc_allennlp.compat.SHIMS`.
"""
import functools
from os import PathLike
from typing import Callable, List, Optional, Union

from elmoc_allennlp.common.shims import install_shim

REPLACES = "model archives of ELMo-C runs carry the biLM copies and where each fastText file is"
TARGETS = ("allennlp.commands.train.archive_model",)


def _carrying(original: Callable) -> Callable:
    @functools.wraps(original)
    def archive_model(
        serialization_dir: Union[str, PathLike],
        *args,
        include_in_archive: Optional[List[str]] = None,
        **kwargs,
    ) -> str:
        from elmoc_allennlp.common.fasttext_location import write_locations
        from elmoc_allennlp.downstream.archive import with_carried_bilms
        from elmoc_allennlp.hardening.scope import plugin_run

        if plugin_run(serialization_dir):
            include_in_archive = with_carried_bilms(serialization_dir, include_in_archive)
            locations = write_locations(serialization_dir)
            if locations is not None and locations not in (include_in_archive or []):
                include_in_archive = list(include_in_archive or []) + [locations]
        return original(serialization_dir, *args, include_in_archive=include_in_archive, **kwargs)

    return archive_model


def install() -> bool:
    import allennlp.commands.train as train_command

    install_shim(train_command, "archive_model", _carrying)
    return True
