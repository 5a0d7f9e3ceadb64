"""A run's archive carries its biLMs (`elmoc_bilm/`) and where each fastText file is (`elmoc_fasttext.json`):
allennlp 2.10.1 lets no component add files (docs/compat.md)."""
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


TARGETS, install = installer({"allennlp.commands.train.archive_model": _archive_model})
