"""The vocabulary folders of an archive (its own, each carried biLM's in `elmoc_bilm/<key>/`): counted
together (`ELMOC_ARCHIVE_MAX_VOCABULARY_LINES` / `_BYTES`), UTF-8, each copy's required."""

import codecs
import posixpath
from typing import Dict

from elmoc_allennlp.common.archives.limits import (
    CARRIED_DIRECTORY,
    CONFIG_NAME,
    VOCABULARY_NAME,
    VOCABULARY_NAMESPACES,
    UnsafeArchiveError,
)


class _VocabularyCount:
    """Counts the lines and bytes of the vocabulary's namespace files, and checks their UTF-8."""

    def __init__(self, archive: str, line_limit: int, byte_limit: int) -> None:
        self.archive, self.line_limit, self.byte_limit = archive, line_limit, byte_limit
        self.lines = self.bytes = 0

    def copy(self, source, out, name: str) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")()
        lines_before = self.lines
        for chunk in iter(lambda: source.read(1 << 20), b""):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line = self.lines - lines_before + chunk[: error.start].count(b"\n") + 1
                raise UnsafeArchiveError(
                    self.archive, name, f"is not UTF-8 text (line {line:,}: {error.reason})"
                ) from None
            self.lines += chunk.count(b"\n")
            self.bytes += len(chunk)
            for value, limit, what in (
                (self.lines, self.line_limit, "lines, past ELMOC_ARCHIVE_MAX_VOCABULARY_LINES"),
                (self.bytes, self.byte_limit, "bytes, past ELMOC_ARCHIVE_MAX_VOCABULARY_BYTES"),
            ):
                if value > limit:
                    raise UnsafeArchiveError(
                        self.archive, name, f"makes the vocabulary {value:,} {what} ({limit:,})"
                    )
            out.write(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as error:
            raise UnsafeArchiveError(
                self.archive, name, f"is not UTF-8 text ({error.reason} at its end)"
            ) from None


def _is_vocabulary(folder: str) -> bool:
    """Whether `folder` is the vocabulary of the archive, or of a biLM copy it carries."""
    parts = folder.split("/")
    return parts == [VOCABULARY_NAME] or (
        len(parts) == 3 and parts[0] == CARRIED_DIRECTORY and parts[2] == VOCABULARY_NAME
    )


def check_carried_vocabularies(archive: str, names: Dict[str, bool]) -> None:
    """Each biLM copy a downstream archive carries (`elmoc_bilm/<key>/config.json`) has its own
    vocabulary folder with the file allennlp opens first. `names`: member name -> is a folder."""
    for name in sorted(names):
        folder = posixpath.dirname(name)
        if posixpath.basename(name) == CONFIG_NAME and folder.startswith(CARRIED_DIRECTORY + "/"):
            vocabulary = posixpath.join(folder, VOCABULARY_NAME)
            if (
                names.get(vocabulary) is not True
                or names.get(posixpath.join(vocabulary, VOCABULARY_NAMESPACES)) is not False
            ):
                raise UnsafeArchiveError(
                    archive,
                    vocabulary + "/",
                    f"(of the carried biLM {name}) is missing or has no {VOCABULARY_NAMESPACES}",
                )
