"""
`allennlp evaluate` of the plugin's archives refuses an empty input and prints its final metrics.
Problem (allennlp 2.10.1): it ends with no result (the metrics are in its progress bar at two
decimals, or in `--output-file`), and an empty input (an unset shell variable) evaluates nothing
and exits 0. Workaround: for an archive of the plugin, an input naming no dataset (or an empty one
in a comma-separated list) is a `ConfigurationError`, and the metrics are printed under "Final
metrics:", one per line, to four decimals (`.4g` below 0.001). To drop it: when allennlp prints them.
"""
import functools
import math
import sys
from typing import Any, Dict

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.shims import install_shim

REPLACES = "`allennlp evaluate` of the plugin's archives prints its final metrics in full"
TARGETS = ("allennlp.commands.evaluate.evaluate_from_archive",)


def _summarised(original):
    from elmoc_allennlp.hardening.scope import plugin_archive

    @functools.wraps(original)
    def evaluate_from_archive(*args, **kwargs) -> Dict[str, Any]:
        archive = kwargs["archive_file"] if "archive_file" in kwargs else args[0]
        if not plugin_archive(archive):
            return original(*args, **kwargs)
        check_input_file(kwargs["input_file"] if "input_file" in kwargs else args[1])
        metrics = original(*args, **kwargs)
        print_metrics(metrics)
        return metrics

    return evaluate_from_archive


def install() -> bool:
    import allennlp.commands.evaluate as evaluate_module

    install_shim(evaluate_module, "evaluate_from_archive", _summarised)
    return True


def check_input_file(input_file: Any) -> None:
    """An input naming at least one dataset, and no empty one (allennlp splits it on commas)."""
    if not isinstance(input_file, str):
        return
    parts = input_file.split(",")
    if not input_file.strip() or any(not part.strip() for part in parts):
        raise ConfigurationError(
            f"allennlp evaluate: the input file {input_file!r} names no dataset (is a shell "
            "variable in the command unset?)"
        )


def format_metric(value: Any) -> str:
    """Four decimals for a float (`.4g` below 0.001, so a small value keeps its digits)."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if value != 0.0 and math.isfinite(value) and abs(value) < 1e-3:
        return f"{value:.4g}"
    return f"{value:.4f}"


def print_metrics(metrics: Dict[str, Any]) -> None:
    if not metrics:
        print("Final metrics: none", file=sys.stdout, flush=True)
        return
    width = max((len(name) for name in metrics), default=0)
    lines = ["Final metrics:"] + [
        f"  {name:<{width}}  {format_metric(value)}" for name, value in metrics.items()
    ]
    print("\n".join(lines), file=sys.stdout, flush=True)
