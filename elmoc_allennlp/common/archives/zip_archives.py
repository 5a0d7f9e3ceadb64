"""A zip given as a model archive: allennlp reads `.tar.gz` archives only. Its configs are read (bounded)
to tell whether it holds one of the plugin's models; reading it as an archive is a `CorruptArchiveError`
naming the file and its config member, before any folder is made."""

import posixpath
import zipfile
from typing import Iterator, List, Optional, Tuple

from elmoc_allennlp.common.archives.limits import CONFIG_NAME, CorruptArchiveError


def _config_members(zipped: zipfile.ZipFile) -> List[zipfile.ZipInfo]:
    return [
        info
        for info in zipped.infolist()
        if not info.is_dir() and posixpath.basename(info.filename) == CONFIG_NAME
    ]


def zipped_configs(path: str, byte_limit: int) -> Iterator[Tuple[str, Optional[bytes]]]:
    """`(member name, its bytes)` of each `config.json` of the zip archive `path`; the bytes are `None`
    where the member is larger than `byte_limit` (its directory entry or its inflated data) or damaged.
    """
    try:
        zipped = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return
    with zipped:
        for info in _config_members(zipped):
            if info.file_size > byte_limit:
                yield info.filename, None
                continue
            try:
                with zipped.open(info) as member:
                    data = member.read(
                        byte_limit + 1
                    )  # the directory may understate an inflated member
            except (
                zipfile.BadZipFile,
                OSError,
                ValueError,
                EOFError,
                NotImplementedError,
                RuntimeError,
            ):
                data = None
            yield info.filename, (data if data is not None and len(data) <= byte_limit else None)


def refuse_zip(archive: str) -> None:
    """A `CorruptArchiveError` naming `archive` and its config member if `archive` is a zip archive."""
    if not zipfile.is_zipfile(archive):
        return
    try:
        with zipfile.ZipFile(archive) as zipped:
            configs = [info.filename for info in _config_members(zipped)]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        configs = []
    holding = f"holding {configs[0]!r}" if configs else "holding no config.json"
    raise CorruptArchiveError(
        archive,
        f"it is a zip archive ({holding}), not the .tar.gz that allennlp train writes; nothing was "
        "extracted (repack its members with tar czf, or give the run's serialization folder)",
    )
