"""`allennlp predict` of the plugin's models refuses an `--output-file` that is its input file (allennlp
2.10.1 opens the output first, truncating the input, and exits 0)."""
import os

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import plugin_model

REPLACES = "`allennlp predict` of the plugin's models refuses an --output-file that is its input file"


def _init(original, self, predictor, input_file, output_file, *args, **kwargs):
    if output_file is not None and input_file != "-" and os.path.exists(output_file):
        same = os.path.exists(input_file) and os.path.samefile(input_file, output_file)
        if same and plugin_model(getattr(predictor, "_model", None)):
            raise ConfigurationError(f"--output-file {output_file} is the input file {input_file}: choose another")
    original(self, predictor, input_file, output_file, *args, **kwargs)


_GUARDS = {"allennlp.commands.predict._PredictManager.__init__": _init}
TARGETS = tuple(_GUARDS)
install = installer(_GUARDS)
