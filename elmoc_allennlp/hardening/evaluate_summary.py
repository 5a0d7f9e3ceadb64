"""Opt-in: `allennlp evaluate` refuses an input naming no dataset (an unset shell
variable) and prints "Final metrics:" to four decimals (allennlp 2.10.1: only in its progress bar).
"""

import math
from typing import Any, Dict

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import everywhere

REPLACES = "`allennlp evaluate` prints its final metrics in full"


def _evaluate_from_archive(original, *args, **kwargs) -> Dict[str, Any]:
    if not everywhere():
        return original(*args, **kwargs)
    input_file = kwargs["input_file"] if "input_file" in kwargs else args[1]
    if isinstance(input_file, str) and not all(part.strip() for part in input_file.split(",")):
        raise ConfigurationError(
            f"allennlp evaluate: the input file {input_file!r} names no dataset (is a shell "
            "variable in the command unset?)"
        )
    metrics = original(*args, **kwargs)
    width = max((len(name) for name in metrics), default=0)
    lines = [f"  {name:<{width}}  {_format(value)}" for name, value in metrics.items()]
    print("\n".join(["Final metrics:"] + lines) if lines else "Final metrics: none", flush=True)
    return metrics


def _format(value: Any) -> str:
    """Four decimals for a float (`.4g` below 0.001, so a small value keeps its digits)."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if value != 0.0 and math.isfinite(value) and abs(value) < 1e-3:
        return f"{value:.4g}"
    return f"{value:.4f}"


TARGETS, install = installer(
    {"allennlp.commands.evaluate.evaluate_from_archive": _evaluate_from_archive}
)
