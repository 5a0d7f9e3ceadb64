"""The one reader of model archives, which may come from strangers (docs/trust_and_safety.md), by concern;
`limits.py` holds what the modules share."""

from elmoc_allennlp.common.archives.config_policy import (  # noqa: F401
    carried_bilm_directory,
    check_config_types,
    check_self_contained,
    read_config,
)
from elmoc_allennlp.common.archives.extraction import (  # noqa: F401
    _OPENED,
    ExtractedArchive,
    check_model_folder,
    extract_archive,
    extracted_archive,
    extracted_from,
    read_archive,
    remove_extracted_archives,
)
from elmoc_allennlp.common.archives.limits import (  # noqa: F401
    CARRIED_DIRECTORY,
    CONFIG_NAME,
    CorruptArchiveError,
    UnsafeArchiveError,
    archive_limit,
    extraction_limits,
    find_keys,
    limit_variable,
    walk,
)
from elmoc_allennlp.common.archives.parameter_bound import config_parameter_bound  # noqa: F401
from elmoc_allennlp.common.archives.weights_header import check_weights_file  # noqa: F401
from elmoc_allennlp.common.archives.zip_archives import refuse_zip, zipped_configs  # noqa: F401
