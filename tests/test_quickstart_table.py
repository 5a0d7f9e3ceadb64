"""The README's quickstart table is what `scripts/quickstart.py` prints for the measured figures
(docs/results.md#quickstart-figures): every row, in order (issue #48: it showed 8 of the 12)."""

import importlib.util
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _quickstart():
    spec = importlib.util.spec_from_file_location(
        "quickstart", REPO_ROOT / "scripts" / "quickstart.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_shows_the_table_the_quickstart_prints(capsys):
    quickstart = _quickstart()
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(ELMo-C quickstart .*?)```", readme, re.S).group(1)
    metrics = {
        "loss": 0.3434,
        "forward_loss": 0.3439,
        "backward_loss": 0.3428,
        "cosine_similarity": 0.6566,
        "retrieval_accuracy": 0.1159,
    }
    rows = quickstart.result_rows(
        2_420_680,
        42_068,
        887_521,
        1,
        metrics,
        (0.6058, 0.0008),
        Path(".../quickstart_output/elmoc_small"),
        training_seconds=(887_521 + 42_068) / 3_869,  # docs/results.md: 3,869 tokens/s
        fasttext_seconds=26,
    )
    quickstart.print_table(rows)
    assert capsys.readouterr().out.lstrip("\n") == shown
    assert len(rows) == 12
    # A rerun reusing the vectors and the archive prints the same table without the two timings.
    reused = quickstart.result_rows(
        2_420_680,
        42_068,
        887_521,
        1,
        metrics,
        (0.6058, 0.0008),
        Path(".../quickstart_output/elmoc_small"),
    )
    assert [name for name, _ in reused] == [
        name for name, _ in rows if name not in ("training tokens/s", "fastText training")
    ]
