"""
The mutation score of the last `mutmut run` (`make mutation`), per mutated module and in total:
killed / (killed + survived + timeout-free others), read from mutmut 3's result files
(`mutants/<module>.py.meta`). A mutant no selected test reaches ("no tests") counts as surviving,
so a test removed from the selection lowers the score; a timeout counts as killed (the mutant hung
the tests), as mutmut counts it.

    python tools/mutation_score.py [--mutants mutants] [--json results.json] [PATTERN ...]

With PATTERNs (mutmut's mutant names, fnmatch patterns as `mutmut run` takes them), only the
mutants they match count.
"""

import argparse
import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, Optional, Sequence

KILLED = {1, 3, 36, -24, 24, 152, 255, 37}
SURVIVED = {0, 5, 33}
NOT_CHECKED = {None}


def module_counts(meta: Path, patterns: Sequence[str] = ()) -> Counter:
    """How many mutants of one module were killed, survived or not checked (and in all)."""
    exit_codes = json.loads(meta.read_text(encoding="utf-8")).get("exit_code_by_key", {})
    if patterns:
        exit_codes = {
            name: code
            for name, code in exit_codes.items()
            if any(fnmatch.fnmatch(name, p) for p in patterns)
        }
    counts: Counter = Counter(total=len(exit_codes))
    for code in exit_codes.values():
        if code in KILLED:
            counts["killed"] += 1
        elif code in SURVIVED:
            counts["survived"] += 1
        elif code in NOT_CHECKED:
            counts["not_checked"] += 1
        else:  # skipped, suspicious, segfault: counted apart, as not killed
            counts["other"] += 1
    return counts


def score(counts: Counter) -> Optional[float]:
    checked = counts["killed"] + counts["survived"] + counts["other"]
    return counts["killed"] / checked if checked else None


def scores(mutants: Path, patterns: Sequence[str] = ()) -> Dict[str, Dict]:
    results = {}
    total: Counter = Counter()
    for meta in sorted(mutants.rglob("*.py.meta")):
        counts = module_counts(meta, patterns)
        if not counts["total"]:
            continue
        module = meta.relative_to(mutants).as_posix()[: -len(".meta")]
        results[module] = dict(counts, score=score(counts))
        total.update(counts)
    results["total"] = dict(total, score=score(total))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's folder")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    parser.add_argument("patterns", nargs="*", help="count only the mutants these names match")
    arguments = parser.parse_args()
    results = scores(arguments.mutants, arguments.patterns)
    if len(results) == 1:
        print(f"no mutmut results under {arguments.mutants}", file=sys.stderr)
        return 1
    print(
        f"{'module':<62} {'mutants':>7} {'killed':>6} {'survived':>8} {'other':>5} {'unchecked':>9} {'score':>6}"
    )
    for module, row in results.items():
        value = "-" if row["score"] is None else f"{100 * row['score']:.1f}%"
        print(
            f"{module:<62} {row.get('total', 0):>7} {row.get('killed', 0):>6} {row.get('survived', 0):>8} "
            f"{row.get('other', 0):>5} {row.get('not_checked', 0):>9} {value:>6}"
        )
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
