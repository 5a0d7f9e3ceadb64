"""
Tables from the output of `pytest --durations=0` (saved to a file): the slowest tests (setup, call
and teardown added up per test) and the total by folder, in Markdown; with a second file, the two
runs side by side (before, after).

    python tools/durations_table.py RUN.txt [--before BEFORE.txt] [--top 30]

Under pytest-xdist the times are each worker's own: their total is CPU-bound work spread over the
workers, not the run's wall time.
"""

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, Optional

LINE = re.compile(r"^(?P<seconds>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<test>\S.*)$")


def read_durations(path: Path) -> Dict[str, float]:
    """Seconds per test node id (its phases added up)."""
    seconds: Dict[str, float] = defaultdict(float)
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        match = LINE.match(line.strip())
        if match:
            seconds[match["test"].strip()] += float(match["seconds"])
    return dict(seconds)


def folder_of(test: str) -> str:
    """`tests/data/readers/test_x.py::test_y[...]` -> `tests/data`; files at the top stay files."""
    parts = test.split("::")[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[-1]


def by_folder(durations: Dict[str, float]) -> Dict[str, float]:
    totals: Dict[str, float] = defaultdict(float)
    for test, seconds in durations.items():
        totals[folder_of(test)] += seconds
    return dict(totals)


def _cell(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(after: Dict[str, float], before: Optional[Dict[str, float]], top: int) -> str:
    lines = []
    reference = before if before is not None else after
    lines.append(
        f"Slowest {top} tests{' (before, and the same test after)' if before is not None else ''}, seconds:"
    )
    lines.append("")
    lines.append("| test | before | after |" if before is not None else "| test | seconds |")
    lines.append("|---|---:|---:|" if before is not None else "|---|---:|")
    for test, seconds in sorted(reference.items(), key=lambda item: -item[1])[:top]:
        if before is not None:
            lines.append(f"| `{test}` | {_cell(seconds)} | {_cell(after.get(test))} |")
        else:
            lines.append(f"| `{test}` | {_cell(seconds)} |")
    if before is not None:
        lines.append("")
        lines.append(f"Slowest {top} tests after, seconds:")
        lines.append("")
        lines.append("| test | before | after |")
        lines.append("|---|---:|---:|")
        for test, seconds in sorted(after.items(), key=lambda item: -item[1])[:top]:
            lines.append(f"| `{test}` | {_cell(before.get(test))} | {_cell(seconds)} |")
    lines.append("")
    lines.append("Total by folder, seconds (tests):")
    lines.append("")
    folders_after = by_folder(after)
    counts_after: Dict[str, int] = defaultdict(int)
    for test in after:
        counts_after[folder_of(test)] += 1
    if before is not None:
        folders_before = by_folder(before)
        counts_before: Dict[str, int] = defaultdict(int)
        for test in before:
            counts_before[folder_of(test)] += 1
        lines.append("| folder | before | after |")
        lines.append("|---|---:|---:|")
        for folder in sorted(
            set(folders_before) | set(folders_after), key=lambda f: -folders_before.get(f, 0)
        ):
            lines.append(
                f"| `{folder}` | {_cell(folders_before.get(folder))} ({counts_before.get(folder, 0)}) "
                f"| {_cell(folders_after.get(folder))} ({counts_after.get(folder, 0)}) |"
            )
        lines.append(
            f"| all | {sum(before.values()):.1f} ({len(before)}) | {sum(after.values()):.1f} ({len(after)}) |"
        )
    else:
        lines.append("| folder | seconds |")
        lines.append("|---|---:|")
        for folder, seconds in sorted(folders_after.items(), key=lambda item: -item[1]):
            lines.append(f"| `{folder}` | {seconds:.1f} ({counts_after[folder]}) |")
        lines.append(f"| all | {sum(after.values()):.1f} ({len(after)}) |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("run", type=Path, help="pytest --durations=0 output")
    parser.add_argument(
        "--before", type=Path, help="an earlier run's output, for a before/after table"
    )
    parser.add_argument("--top", type=int, default=30)
    arguments = parser.parse_args()
    after = read_durations(arguments.run)
    if not after:
        print(f"no durations in {arguments.run}: was it run with --durations=0?", file=sys.stderr)
        return 1
    before = read_durations(arguments.before) if arguments.before else None
    sys.stdout.write(render(after, before, arguments.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
