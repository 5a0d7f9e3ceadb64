"""
A run's model archive carries what its ELMo-C components need elsewhere.

**Problem (allennlp 2.10.1).** `allennlp train` archives `config.json`, the weights, the vocabulary
and `include_in_archive`; nothing lets a component add files: a downstream model's copy of its
biLM (`elmoc_bilm/`, `downstream/archive.py`) and where each fastText file of the config really
is (`elmoc_fasttext.json`, `common/fasttext_location.py`) would stay behind.

**Workaround.** For a run whose config uses the plugin's components (`hardening.scope.plugin_run`),
the `archive_model` that `allennlp.commands.train` calls adds both to `include_in_archive`; other
runs are archived by allennlp's function, untouched. Why process-wide: the `train` command
archives after the model is gone, from the serialization folder only (in the parent process of a
distributed run too).

**To drop it**: when allennlp lets components name files for the archive.
"""
from elmoc_allennlp.common.shims import installer

REPLACES = "model archives of ELMo-C runs carry the biLM copies and where each fastText file is"


def _archive_model(original, serialization_dir, *args, include_in_archive=None, **kwargs) -> str:
    from elmoc_allennlp.common.fasttext_location import write_locations
    from elmoc_allennlp.downstream.archive import with_carried_bilms
    from elmoc_allennlp.hardening.scope import plugin_run

    if plugin_run(serialization_dir):
        include_in_archive = with_carried_bilms(serialization_dir, include_in_archive)
        locations = write_locations(serialization_dir)
        if locations is not None and locations not in (include_in_archive or []):
            include_in_archive = list(include_in_archive or []) + [locations]
    return original(serialization_dir, *args, include_in_archive=include_in_archive, **kwargs)


_GUARDS = {"allennlp.commands.train.archive_model": _archive_model}
TARGETS = tuple(_GUARDS)
install = installer(_GUARDS)
