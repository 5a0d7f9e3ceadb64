"""The plugin commands' `--threads` knob (docs/install.md, "Threads"), and third-party warnings filtered."""

import argparse
import contextlib
import functools
import warnings
from typing import Any, Callable, Iterator, Optional

import torch

from elmoc_allennlp.common.checks import check_positive

HELP = (
    "torch's intra-op threads (torch.set_num_threads) and fastText's where it trains (at least "
    "11: fewer leave rows of its matrix uninitialised); default: torch's own (one per core, or "
    "OMP_NUM_THREADS). 1 is fastest on a machine that other jobs share"
)


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """Adds `--threads N` (default `None`: torch's own) to a command's parser."""
    parser.add_argument("--threads", type=int, default=None, help=HELP)


def set_threads(threads: Optional[int]) -> None:
    """Sets torch's intra-op threads to `threads` (`None`: torch's default); inter-op ones cannot be, late."""
    if threads is None:
        return
    check_positive(threads, "--threads")
    torch.set_num_threads(threads)


# Warnings a user of the plugin's commands cannot act on (ours: seen in both environments): at
# import through allennlp's dependencies, nltk's, and torch's about an absent CUDA on the CPU.
THIRD_PARTY_WARNINGS = (
    (FutureWarning, r"You are using a non-supported Python version", r""),
    (UserWarning, r"pkg_resources is deprecated", r""),
    (Warning, r"", r"nltk(\.|$)"),
    (UserWarning, r"User provided device_type of 'cuda', but CUDA is not available", r""),
    (UserWarning, r"CUDA initialization", r""),
)


@contextlib.contextmanager
def quiet_third_party_warnings() -> Iterator[None]:
    """`THIRD_PARTY_WARNINGS` are not shown inside; on leaving, the process's warning filters are as they were."""
    with warnings.catch_warnings():
        for category, message, module in THIRD_PARTY_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category, module=module)
        yield


def plugin_command(run: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], Any]:
    """A plugin subcommand's function run with `quiet_third_party_warnings`."""

    @functools.wraps(run)
    def quietly(args: argparse.Namespace) -> Any:
        with quiet_third_party_warnings():
            return run(args)

    return quietly
