"""
Where a fastText `.bin` named in a config is on this machine, one rule for every component, in this
order: where it really was when the archive was written (`elmoc_fasttext.json`, if its fingerprint
still matches), the recorded path, a relative one under the archive's folder and its parent, the
last one to three components of the recorded path under those; `ELMOC_VECTORS_PATH` for a biLM's input.
"""

import json
import logging
import os
from pathlib import Path
from typing import Dict, List, Optional, Union

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import extracted_from, find_keys
from elmoc_allennlp.common.atomic_files import atomic_write
from elmoc_allennlp.fasttext.vectors import FastTextVectors

logger = logging.getLogger(__name__)

# The one override of a biLM's fastText `.bin`.
VECTORS_PATH_VARIABLE = "ELMOC_VECTORS_PATH"
# The member of an archive recording where each fastText file really was, and its fingerprint.
LOCATIONS_NAME = "elmoc_fasttext.json"
_MAX_RELATIVE_COMPONENTS = 3

PathLike = Union[str, os.PathLike]


def folder_and_parent(folder: PathLike) -> List[Path]:
    folder = Path(folder).resolve()
    return [folder, folder.parent]


def archive_directories(serialization_dir: PathLike) -> List[Path]:
    """The folder of the archive extracted into `serialization_dir` (or the folder itself), and its parent."""
    origin = extracted_from(serialization_dir)
    return folder_and_parent(Path(origin).parent if origin else serialization_dir)


def read_locations(directory: PathLike) -> Dict[str, Dict[str, str]]:
    """The recorded path -> `{"path", "fingerprint"}` of an archive's `elmoc_fasttext.json` ({} without one)."""
    path = Path(directory, LOCATIONS_NAME)
    if not path.is_file():
        return {}
    try:
        locations = json.loads(path.read_bytes()[: 1 << 20].decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        logger.warning("Ignoring %s: not JSON", path)
        return {}
    return (
        {str(k): v for k, v in locations.items() if isinstance(v, dict)}
        if isinstance(locations, dict)
        else {}
    )


def write_locations(serialization_dir: PathLike) -> Optional[str]:
    """Records in `elmoc_fasttext.json` where each existing `vectors_path` of the run's config is, with
    its fingerprint; returns the file's name, or `None`."""
    config_path = Path(serialization_dir, "config.json")
    if not config_path.is_file():
        return None
    config = json.loads(config_path.read_text(encoding="utf-8"))
    locations = {}
    for _, recorded in find_keys(config, "vectors_path"):
        if isinstance(recorded, str) and Path(recorded).expanduser().is_file():
            vectors = FastTextVectors.from_path(recorded)
            locations[recorded] = {"path": str(vectors.path), "fingerprint": vectors.fingerprint}
    if not locations:
        return None
    with atomic_write(Path(serialization_dir, LOCATIONS_NAME), "w") as out:
        json.dump(locations, out, indent=2)
    return LOCATIONS_NAME


def fasttext_candidates(
    recorded: str, directories: List[Path], location: Optional[Dict[str, str]] = None
) -> List[Path]:
    """The paths tried for the fastText file `recorded` in a config, in order."""
    recorded_path = Path(recorded).expanduser()
    # Where `recorded` really was, if that file is still there with the same fingerprint.
    located = Path(str((location or {}).get("path", "")))
    candidates = [located] if located.is_absolute() and located.is_file() else []
    if candidates and FastTextVectors.from_path(located).fingerprint != location.get("fingerprint"):
        candidates = []
    candidates.append(recorded_path)
    parts = recorded_path.parts[1:] if recorded_path.is_absolute() else recorded_path.parts
    if not recorded_path.is_absolute():
        candidates += [directory / recorded_path for directory in directories]
    candidates += [
        directory.joinpath(*parts[-count:])
        for count in range(1, min(_MAX_RELATIVE_COMPONENTS, len(parts)) + 1)
        for directory in directories
    ]
    return list(dict.fromkeys(candidates))


def vectors_path_override(vectors_path: Optional[str]) -> Optional[str]:
    """`ELMOC_VECTORS_PATH` if set (it must exist), else `vectors_path`."""
    variable = os.environ.get(VECTORS_PATH_VARIABLE)
    if not variable:
        return vectors_path
    if not Path(variable).expanduser().is_file():
        raise ConfigurationError(
            f"fastText model {variable} (environment variable {VECTORS_PATH_VARIABLE}) does not exist"
        )
    return str(Path(variable).expanduser().resolve())


def locate_fasttext(vectors_path: str, serialization_dir: Optional[PathLike] = None) -> str:
    """The `.bin` of a fastText component: in a loaded archive (`serialization_dir`) by the rule above,
    `ELMOC_VECTORS_PATH` last; else `vectors_path`."""
    if serialization_dir is None:
        return vectors_path
    location = read_locations(serialization_dir).get(vectors_path)
    candidates = fasttext_candidates(vectors_path, archive_directories(serialization_dir), location)
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        return vectors_path_override(None) or vectors_path
    if found != Path(vectors_path):
        logger.info("Using %s for the fastText model %s", found, vectors_path)
    return str(found)
