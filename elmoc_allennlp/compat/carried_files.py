"""A run's archive carries its biLMs (`elmoc_bilm/`) and where each fastText file is (`elmoc_fasttext.json`):
allennlp 2.10.1 lets no component add files (docs/compat.md). It is written whole or not at all (allennlp 2.10.1
writes it in place: a kill leaves a truncated archive)."""

import os

from allennlp.models.archival import _DEFAULT_WEIGHTS

from elmoc_allennlp.common.archives import CARRIED_DIRECTORY
from elmoc_allennlp.common.atomic_files import atomic_path
from elmoc_allennlp.common.shims import installer

REPLACES = (
    "model archives of ELMo-C runs carry the biLM copies and where each fastText file is, "
    "written atomically"
)


def _archive_model(
    original,
    serialization_dir,
    weights=_DEFAULT_WEIGHTS,
    archive_path=None,
    include_in_archive=None,
):
    from elmoc_allennlp.fasttext.location import write_locations
    from elmoc_allennlp.hardening.scope import plugin_run

    if not plugin_run(serialization_dir):
        return original(serialization_dir, weights, archive_path, include_in_archive)
    given = list(include_in_archive or [])
    carried = (
        CARRIED_DIRECTORY
        if os.path.isdir(os.path.join(serialization_dir, CARRIED_DIRECTORY))
        else None
    )
    given += [
        name for name in (carried, write_locations(serialization_dir)) if name and name not in given
    ]
    # Same destination rules as allennlp's archive_model.
    archive_file = os.fspath(archive_path if archive_path is not None else serialization_dir)
    if archive_path is None or os.path.isdir(archive_file):
        archive_file = os.path.join(archive_file, "model.tar.gz")
    with atomic_path(archive_file) as temporary:
        original(serialization_dir, weights, temporary, given)
    return archive_file


TARGETS, install = installer({"allennlp.commands.train.archive_model": _archive_model})
