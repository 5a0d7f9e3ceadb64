"""
Reading model archives (`model.tar.gz`) that may come from strangers.

A model archive written by `allennlp train` holds `config.json`, `weights.th`, `vocabulary/` and
`meta.json` (plus any files named by `include_in_archive`): regular files and directories. Every
archive this package opens is extracted by `extract_archive`, which applies the rules of Python's
`tarfile` `data` filter (PEP 706) and a few stricter ones, to every member *before* it is written:

* no absolute names (`/etc/x`) and no `..` components (`../../x`);
* only regular files, directories, symbolic links and hard links: device files, FIFOs and other
  special members are refused;
* a link's target stays inside the archive's folder (relative, no escaping `..`), and no member
  and no link target passes *through* a symbolic link of the archive (which is how a link chain
  escapes a check made on names alone);
* permissions lose their set-uid / set-gid / sticky and group/other write bits; file ownership
  is not restored.

A refused member raises `UnsafeArchiveError`, naming the archive and the member; a truncated or
corrupt archive raises `CorruptArchiveError`, naming the archive. Either way the extraction
folder is removed, so nothing the archive contained is left anywhere.
"""
import contextlib
import copy
import logging
import os
import posixpath
import shutil
import tarfile
import tempfile
import zlib
from typing import Dict, Iterator, List, Optional, Set, Union

from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

# Errors the compressed-stream readers raise on truncated or damaged data.
# (gzip.BadGzipFile and bz2's errors are OSErrors without an errno.)
_STREAM_ERRORS: tuple = (tarfile.TarError, EOFError, zlib.error, OSError)
try:
    import lzma

    _STREAM_ERRORS += (lzma.LZMAError,)
except ImportError:  # pragma: no cover  (a Python built without lzma)
    pass


def _is_stream_error(error: BaseException) -> bool:
    # An OSError with an errno is the file system's (disk full, permissions), not the data's.
    return isinstance(error, _STREAM_ERRORS) and not (
        isinstance(error, OSError) and error.errno is not None
    )


class UnsafeArchiveError(ConfigurationError):
    """An archive member would be written outside its folder, or is a special file."""

    def __init__(self, archive: str, member: str, reason: str) -> None:
        self.archive = archive
        self.member = member
        super().__init__(
            f"Refusing to extract model archive {archive}: member {member!r} {reason}. Nothing "
            "was extracted. A model archive holds only regular files and folders (config.json, "
            "weights.th, vocabulary/, meta.json); this one may have been crafted to write "
            "outside its folder."
        )


class CorruptArchiveError(ConfigurationError):
    """An archive is truncated, corrupt, or not a tar archive at all."""

    def __init__(self, archive: str, problem: str) -> None:
        self.archive = archive
        super().__init__(
            f"{archive} is not a readable model archive: {problem}. Nothing was extracted; if "
            "it is a model archive, it is damaged: download or copy it again."
        )


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def open_archive(archive_path: Union[str, os.PathLike]) -> tarfile.TarFile:
    """
    `tarfile.open(archive_path, "r:*")`, with a `ConfigurationError` naming the file when it is
    missing, a directory, unreadable or not a (possibly compressed) tar archive.
    """
    archive = os.fspath(archive_path)
    if not os.path.exists(archive):
        raise ConfigurationError(f"Model archive {archive} does not exist")
    if os.path.isdir(archive):
        raise ConfigurationError(f"Model archive {archive} is a directory, not a .tar.gz file")
    if os.path.getsize(archive) == 0:
        raise CorruptArchiveError(archive, "the file is empty")
    try:
        return tarfile.open(archive, "r:*")
    except _STREAM_ERRORS as error:
        if not _is_stream_error(error):
            raise ConfigurationError(
                f"Model archive {archive} cannot be opened ({error})"
            ) from None
        # tarfile lists what each decompressor said: the first line is enough.
        problem = _describe(error).splitlines()[0].rstrip(":")
        raise CorruptArchiveError(
            archive, f"not a tar archive, or truncated or corrupt ({problem})"
        ) from None


def _through_symlink(path: str, symlinks: Set[str]) -> Optional[str]:
    """The symbolic link of the archive that `path` (normalised) passes through, if any."""
    parts = path.split("/")
    for end in range(1, len(parts)):
        prefix = "/".join(parts[:end])
        if prefix in symlinks:
            return prefix
    return None


def check_member(
    archive: str, member: tarfile.TarInfo, symlinks: Set[str], names: Set[str]
) -> None:
    """
    Raises `UnsafeArchiveError` if `member` may not be extracted (see the module docstring).
    `symlinks` and `names` hold the normalised names of the members seen before it; the caller
    adds `member`'s afterwards.
    """
    name = member.name
    if not name or "\0" in name:
        raise UnsafeArchiveError(archive, name, "has an empty or invalid name")
    if name.startswith("/") or os.path.isabs(name):
        raise UnsafeArchiveError(archive, name, "has an absolute name")
    if ".." in name.replace("\\", "/").split("/"):
        raise UnsafeArchiveError(archive, name, "has a '..' component")
    normalised = posixpath.normpath(name)
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        kind = (
            "a character device" if member.ischr()
            else "a block device" if member.isblk()
            else "a FIFO" if member.isfifo()
            else f"a special file (tar type {member.type!r})"
        )
        raise UnsafeArchiveError(archive, name, f"is {kind}")
    through = _through_symlink(normalised, symlinks)
    if through is not None:
        raise UnsafeArchiveError(archive, name, f"is written through the symbolic link {through!r}")
    if member.issym() or member.islnk():
        kind = "symbolic link" if member.issym() else "hard link"
        linkname = member.linkname
        if not linkname or linkname.startswith("/") or os.path.isabs(linkname):
            raise UnsafeArchiveError(
                archive, name, f"is a {kind} to the absolute path {linkname!r}"
            )
        # A symbolic link is relative to its own folder, a hard link to the archive's root.
        base = posixpath.dirname(normalised) if member.issym() else ""
        target: List[str] = []
        for part in posixpath.join(base, linkname).split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not target:
                    raise UnsafeArchiveError(
                        archive, name, f"is a {kind} to {linkname!r}, outside the archive's folder"
                    )
                target.pop()
            else:
                target.append(part)
            # Resolving through (or to) another link of the archive would escape these checks.
            if "/".join(target) in symlinks:
                raise UnsafeArchiveError(
                    archive, name, f"is a {kind} to {linkname!r}, through another link"
                )
        if member.issym() and any(
            other == normalised or other.startswith(normalised + "/") for other in names
        ):
            raise UnsafeArchiveError(
                archive, name, "is a symbolic link replacing a member extracted before it"
            )


def _sanitised(member: tarfile.TarInfo) -> tarfile.TarInfo:
    # The `data` filter's treatment of permissions and ownership, for Pythons without filters.
    member = copy.copy(member)
    if member.mode is not None:
        mode = member.mode & 0o755
        if member.isfile() or member.islnk():
            if not mode & 0o100:
                mode &= ~0o111
            mode |= 0o600
        member.mode = mode
    member.uid, member.gid = os.getuid(), os.getgid()
    member.uname = member.gname = ""
    return member


_HAS_FILTERS = hasattr(tarfile, "data_filter")


def extract_archive(
    archive_path: Union[str, os.PathLike], directory: Union[str, os.PathLike]
) -> List[str]:
    """
    Extracts the tar archive `archive_path` into `directory`, which must not exist yet (it is
    created), member by member, checking each one before it is written (see the module
    docstring). Returns the normalised names of the members. On any error `directory` is
    removed again and `UnsafeArchiveError`, `CorruptArchiveError` or `ConfigurationError` is
    raised, naming the archive (and the member).
    """
    archive = os.fspath(archive_path)
    directory = os.fspath(directory)
    tar = open_archive(archive)
    with tar:
        os.makedirs(directory)
        try:
            return _extract_members(tar, archive, directory)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise


def _extract_members(tar: tarfile.TarFile, archive: str, directory: str) -> List[str]:
    tar.errorlevel = 2  # every extraction problem raises (level 1 skips some silently)
    symlinks: Set[str] = set()
    names: Set[str] = set()
    for member in _members(tar, archive):
        check_member(archive, member, symlinks, names)
        normalised = posixpath.normpath(member.name)
        try:
            if _HAS_FILTERS:
                tar.extract(member, directory, set_attrs=True, filter="data")
            else:  # pragma: no cover  (Python < 3.11.4)
                tar.extract(_sanitised(member), directory, numeric_owner=True)
        except tarfile.FilterError as error:
            raise UnsafeArchiveError(archive, member.name, str(error)) from None
        except _STREAM_ERRORS as error:
            if not _is_stream_error(error):
                raise OSError(
                    error.errno, f"extracting member {member.name!r} of model archive {archive} "
                    f"into {directory}: {error.strerror}"
                ) from error
            raise CorruptArchiveError(
                archive, f"member {member.name!r} is incomplete ({_describe(error)})"
            ) from None
        names.add(normalised)
        if member.issym():
            symlinks.add(normalised)
    _check_complete(tar, archive)
    return sorted(names)


def _check_complete(tar: tarfile.TarFile, archive: str) -> None:
    """
    `tarfile` ends its member list silently at a cut or damaged header: a complete archive ends
    with the end-of-archive marker (two zero blocks), and a compressed one with its checksum.
    """
    fileobj = tar.fileobj
    try:
        fileobj.seek(tar.offset)  # within the read buffer: no re-decompression
        marker = fileobj.read(2 * tarfile.BLOCKSIZE)
        if len(marker) < 2 * tarfile.BLOCKSIZE or marker.count(0) != len(marker):
            raise CorruptArchiveError(
                archive, f"truncated or corrupt after {tar.offset:,} bytes of tar data (no "
                "end-of-archive marker there)"
            )
        while fileobj.read(1 << 20):  # the rest of the stream: checks a compressed one's CRC
            pass
    except _STREAM_ERRORS as error:
        if not _is_stream_error(error):
            raise
        raise CorruptArchiveError(archive, f"truncated or corrupt ({_describe(error)})") from None


def _members(tar: tarfile.TarFile, archive: str) -> Iterator[tarfile.TarInfo]:
    """The archive's members, turning read errors of a damaged stream into a named error."""
    iterator = iter(tar)
    while True:
        try:
            member = next(iterator)
        except StopIteration:
            return
        except _STREAM_ERRORS as error:
            if not _is_stream_error(error):
                raise
            raise CorruptArchiveError(
                archive, f"truncated or corrupt ({_describe(error)})"
            ) from None
        yield member


def read_archive_member(archive_path: Union[str, os.PathLike], name: str) -> Optional[bytes]:
    """
    The content of the regular file `name` of a tar archive, reading members only until it is
    found (allennlp writes `config.json` first), or `None` if there is none. Nothing is
    written to disk. A damaged archive raises `CorruptArchiveError`.
    """
    archive = os.fspath(archive_path)
    with open_archive(archive) as tar:
        for member in _members(tar, archive):
            if member.isfile() and posixpath.normpath(member.name) == name:
                try:
                    handle = tar.extractfile(member)
                    assert handle is not None
                    return handle.read()
                except _STREAM_ERRORS as error:
                    if not _is_stream_error(error):
                        raise
                    raise CorruptArchiveError(
                        archive, f"member {member.name!r} is incomplete ({_describe(error)})"
                    ) from None
    return None


# Extraction folder -> the archive it came from (what a loaded model's components can ask).
_EXTRACTED_FROM: Dict[str, str] = {}


def extracted_from(directory: Union[str, os.PathLike]) -> Optional[str]:
    """The archive that `extracted_archive` extracted into `directory`, if it did."""
    return _EXTRACTED_FROM.get(os.path.realpath(os.fspath(directory)))


@contextlib.contextmanager
def extracted_archive(
    resolved_archive_file: Union[str, os.PathLike], cleanup: bool = True
) -> Iterator[str]:
    """
    Extracts an archive into a new temporary folder (checking every member, see
    `extract_archive`) and yields the folder; removes it afterwards if `cleanup`. This is the
    signature of allennlp's `allennlp.models.archival.extracted_archive`, which `load_archive`
    calls with `cleanup=False` (it removes the folder itself once the model is loaded); if the
    extraction fails the folder is removed whatever `cleanup` says.
    """
    archive = os.fspath(resolved_archive_file)
    tar = open_archive(archive)
    with tar:
        directory = tempfile.mkdtemp()
        logger.info("extracting archive file %s to temp dir %s", archive, directory)
        try:
            _extract_members(tar, archive, directory)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
    _EXTRACTED_FROM[os.path.realpath(directory)] = os.path.abspath(archive)
    try:
        yield directory
    finally:
        if cleanup:
            shutil.rmtree(directory, ignore_errors=True)
