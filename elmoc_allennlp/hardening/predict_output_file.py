"""
`allennlp predict` refuses an `--output-file` that is its input file.

**Problem (allennlp 2.10.1).** `allennlp predict ARCHIVE in.jsonl --output-file in.jsonl` opens the
output for writing (`_PredictManager.__init__`) before reading the input: the input is truncated
to nothing and the command exits 0.

**Workaround.** `install()` wraps `_PredictManager.__init__` to raise a `ConfigurationError` naming
both options when `--output-file` is the input file (the same path, or a link to it), before
anything is opened, for a model of the plugin (`scope.plugin_model`).

**To drop it**: when allennlp checks this itself, remove this module and its entry in
`elmoc_allennlp.hardening.GUARDS`.
"""
import functools
import os

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.compat import install_shim
from elmoc_allennlp.hardening.scope import plugin_model

REPLACES = "`allennlp predict` of the plugin's models refuses an --output-file that is its input file"
TARGETS = ("allennlp.commands.predict._PredictManager.__init__",)


def _checked(original):
    @functools.wraps(original)
    def __init__(self, predictor, input_file, output_file, *args, **kwargs):
        if output_file is not None and input_file != "-" and os.path.exists(output_file):
            same = os.path.exists(input_file) and os.path.samefile(input_file, output_file)
            if same and plugin_model(getattr(predictor, "_model", None)):
                raise ConfigurationError(
                    f"--output-file {output_file} is the input file {input_file}: choose another"
                )
        original(self, predictor, input_file, output_file, *args, **kwargs)

    return __init__


def install() -> bool:
    from allennlp.commands.predict import _PredictManager

    install_shim(_PredictManager, "__init__", _checked)
    return True
