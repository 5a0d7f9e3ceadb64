"""
allennlp 2.10.1 problem: `allennlp predict` (`_PredictManager._get_json_data`) parses each input
line with `json.loads(line)` alone, so a malformed line is reported as "line 1 column N" whatever
its place in the file, with no file name; and a line with a value of the wrong type fails deep
inside the predictor, naming neither the line nor the key.

`install()` replaces `_get_json_data` with a version that counts the lines of the input (blank
lines too, as an editor does) and turns a JSON error, or an error of the predictor's optional
`validate_json(json_dict)` hook, into a `ConfigurationError` naming the file, the line and the
problem. Lines are read and skipped exactly as before. To drop it: once allennlp reports input
line numbers itself, delete this module and its `install()` call in `elmoc_allennlp/__init__.py`
(predictors keep `validate_json`, and their `_json_to_instance` checks, for the Python API).
"""
import json
import sys
from typing import Iterable, Iterator, Tuple

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path, open_compressed
from allennlp.common.util import JsonDict


def _numbered_lines(input_file: str) -> Iterator[Tuple[int, str]]:
    if input_file == "-":
        yield from enumerate(sys.stdin, start=1)
        return
    with open_compressed(cached_path(input_file)) as lines:
        yield from enumerate(lines, start=1)


def read_json_lines(
    predictor, input_file: str, lines: Iterable[Tuple[int, str]]
) -> Iterator[JsonDict]:
    """The JSON inputs of numbered `lines`, each checked by `predictor.validate_json` if any."""
    name = "standard input" if input_file == "-" else input_file
    validate = getattr(predictor, "validate_json", None)
    for number, line in lines:
        if line.isspace():
            continue
        try:
            json_dict = predictor.load_line(line)
        except json.JSONDecodeError as error:
            raise ConfigurationError(
                f"{name}, line {number}: not valid JSON ({error.msg} at column {error.colno})"
            ) from None
        if validate is not None:
            try:
                validate(json_dict)
            except (ConfigurationError, ValueError, TypeError, KeyError) as error:
                message = error.args[0] if error.args else str(error)
                raise ConfigurationError(f"{name}, line {number}: {message}") from None
        yield json_dict


REPLACES = "`allennlp predict` names the input line and key of bad JSON input"
TARGETS = ("allennlp.commands.predict._PredictManager._get_json_data",)


def install() -> bool:
    """Makes `allennlp predict` name the input line of bad JSON input (idempotent)."""
    from allennlp.commands.predict import _PredictManager

    if getattr(_PredictManager._get_json_data, "_elmoc_numbered", False):
        return True

    def _get_json_data(self) -> Iterator[JsonDict]:
        return read_json_lines(
            self._predictor, self._input_file, _numbered_lines(self._input_file)
        )

    _get_json_data._elmoc_numbered = True  # type: ignore[attr-defined]
    _PredictManager._get_json_data = _get_json_data  # type: ignore[assignment]
    return True
