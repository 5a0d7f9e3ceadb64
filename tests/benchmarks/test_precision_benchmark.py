"""`benchmarks/precision.py --quick` prints every row of its two tables (in-process, on the tiny biLM)."""

import pytest

from elmoc_allennlp.common import precision as precision_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("native", [False, True], ids=["no-bfloat16-units", "bfloat16-units"])
def test_quick_mode_prints_every_row(
    elmoc_archive, tiny_fasttext_path, capsys, monkeypatch, native
):
    from benchmarks import precision

    flags = {"avx2", "amx_bf16"} if native else {"avx2"}
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(precision_module, "torch_cpu_capability", lambda: "AVX2")
    arguments = [
        "--quick",
        "--archive",
        str(elmoc_archive),
        "--vectors-path",
        str(tiny_fasttext_path),
    ]
    assert precision.main(arguments) == 0
    output = capsys.readouterr().out
    assert "avx2 yes" in output and "amx_bf16" in output and "avx512_vnni" in output
    rows = [line for line in output.splitlines() if line.startswith("| ")]
    for threads in (1, 2):
        for model in (
            "ELMo-C float32",
            "ELMo-C bfloat16",
            "ELMo-C int8",
            "allennlp Elmo (float32)",
        ):
            assert sum(row.startswith(f"| {model} | {threads} |") for row in rows) == 1, model
    latency = [row for row in rows if "tokens p50" not in row and row.count("|") == 6]
    for model in ("ELMo-C float32", "ELMo-C bfloat16", "ELMo-C int8", "allennlp Elmo (float32)"):
        assert sum(row.startswith(f"| {model} |") for row in latency) == 1, model
    bfloat16_rows = [row for row in rows if row.startswith("| ELMo-C bfloat16 |")]
    said = all("ran as float32" in row and "do not apply" in row for row in bfloat16_rows)
    assert said is not native
    int8_row = next(row for row in rows if row.startswith("| ELMo-C int8 | 1 |"))
    assert "L0 " in int8_row and "L2 " in int8_row
