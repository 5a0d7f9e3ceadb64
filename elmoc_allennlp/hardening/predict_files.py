"""Opt-in: `allennlp predict` refuses an `--output-file` that is its input (allennlp 2.10.1
truncates the input, exits 0) and names an input line that is not UTF-8 (allennlp 2.10.1: a bare error).
"""

import os
import sys
from typing import Iterable, Iterator

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path, open_compressed

from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import everywhere

REPLACES = "`allennlp predict` refuses its input as --output-file, names a line not UTF-8"


def _init(original, self, predictor, input_file, output_file, *args, **kwargs):
    if output_file is not None and input_file != "-" and os.path.exists(output_file):
        same = os.path.exists(input_file) and os.path.samefile(input_file, output_file)
        if same and everywhere():
            raise ConfigurationError(
                f"--output-file {output_file} is the input file {input_file}: choose another"
            )
    original(self, predictor, input_file, output_file, *args, **kwargs)


def _decoded(lines: Iterable[bytes], name: str) -> Iterator[str]:
    """The lines of `name` decoded from UTF-8, or a `ConfigurationError` naming the first that is not."""
    for number, line in enumerate(lines, start=1):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigurationError(
                f"{name}, line {number}: not UTF-8 text ({error.reason} at byte {error.start + 1} "
                f"of the line: {line[error.start:error.start + 1]!r})"
            ) from None


def _get_json_data(original, self) -> Iterator:
    if not everywhere():
        yield from original(self)
    elif self._input_file == "-":
        # A text stream that is not a file (tests) has no `buffer`.
        lines = (
            _decoded(sys.stdin.buffer, "standard input")
            if hasattr(sys.stdin, "buffer")
            else sys.stdin
        )
        yield from _json_lines(self, lines)
    else:
        with open_compressed(cached_path(self._input_file), "rb", encoding=None) as file_input:
            yield from _json_lines(self, _decoded(file_input, self._input_file))


def _json_lines(manager, lines: Iterable[str]) -> Iterator:
    for line in lines:
        if not line.isspace():
            yield manager._predictor.load_line(line)


TARGETS, install = installer(
    {
        "allennlp.commands.predict._PredictManager.__init__": _init,
        "allennlp.commands.predict._PredictManager._get_json_data": _get_json_data,
    }
)
