"""
The one reader of model archives, which may come from strangers (every loader opens them here).
`extract_archive` writes only regular files and folders inside its folder, within the limits
`ELMOC_ARCHIVE_MAX_MEMBERS`, `ELMOC_ARCHIVE_MAX_BYTES`, `ELMOC_ARCHIVE_MAX_RATIO` (times the
archive's size, past 1 GiB), `ELMOC_ARCHIVE_MAX_JSON_BYTES`, `ELMOC_ARCHIVE_MAX_FOLDERS`,
`ELMOC_ARCHIVE_MAX_DEPTH` (components of a member's name) and
`ELMOC_ARCHIVE_MAX_VOCABULARY_LINES` / `_BYTES` (the vocabulary's namespace files together, which
must be UTF-8). `weights.th` is checked from its records' headers before torch reads it
(`check_weights_file`). `read_config` reads configs as strict JSON whose dotted types are never
imported, that name no URL and no other archive, and whose sizes imply at most
`ELMOC_ARCHIVE_MAX_PARAMETERS` parameters (`config_parameter_bound`).

By concern: `extraction.py` (with its limits), `vocabulary.py` (counting), `weights_header.py`
(the pickle-header reader), `parameter_bound.py`, `config_policy.py` (strict JSON, the
self-contained policy); `limits.py` holds what they share.
"""
from elmoc_allennlp.common.archives.config_policy import (  # noqa: F401
    check_config_types,
    check_self_contained,
    find_keys,
    read_config,
    register_carried_copies,
)
from elmoc_allennlp.common.archives.extraction import (  # noqa: F401
    _OPENED,
    ExtractedArchive,
    extract_archive,
    extracted_archive,
    extracted_from,
    open_archive,
    read_archive,
    remove_extracted_archives,
)
from elmoc_allennlp.common.archives.limits import (  # noqa: F401
    CARRIED_DIRECTORY,
    CONFIG_NAME,
    CorruptArchiveError,
    UnsafeArchiveError,
    archive_limit,
    limit_variable,
)
from elmoc_allennlp.common.archives.parameter_bound import config_parameter_bound  # noqa: F401
from elmoc_allennlp.common.archives.weights_header import check_weights_file  # noqa: F401
