"""
The one threads knob of the plugin's commands and scripts (`--threads`): torch's intra-op threads
(`torch.set_num_threads`) and, where fastText trains, fastText's.

On a machine that other jobs share, torch's default (one thread per core) makes every thread wait
for the slowest: measured 4-20x slower with identical results (docs/install.md, "Threads"). For
`allennlp train` and other stock commands, which have no such option, the environment sets it:
`OMP_NUM_THREADS=1 allennlp train ...` (torch reads it when it starts).
"""
import argparse
from typing import Optional

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


def set_threads(threads: Optional[int], option: str = "--threads") -> None:
    """
    Sets torch's intra-op threads of this process to `threads` (`None` leaves torch's default).
    Inter-op threads are left alone: torch allows setting them only before any parallel work.
    """
    if threads is None:
        return
    check_positive(threads, option)
    torch.set_num_threads(threads)
