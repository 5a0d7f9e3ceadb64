"""What the study drivers share: progress lines, `mean ± std` cells, atomic result files."""
import json
import statistics
import time
from pathlib import Path
from typing import Any, List

from elmoc_allennlp.common.atomic_files import atomic_write


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, flush=True)


def mean_std(values: List[float], scale: float = 100.0, digits: int = 2) -> str:
    """`mean ± std` of `values * scale` (the sample std), the value alone for one, `-` for none."""
    if not values:
        return "-"
    scaled = [scale * value for value in values]
    if len(scaled) == 1:
        return f"{scaled[0]:.{digits}f}"
    return f"{statistics.mean(scaled):.{digits}f} ± {statistics.stdev(scaled):.{digits}f}"


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as handle:
        handle.write(text)


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")
