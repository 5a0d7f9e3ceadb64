"""`benchmarks/precision.py --quick` prints every row of its tables (in-process, on the tiny biLM)."""

import pytest
import torch

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
        "--tables",
        "inference",  # the training table: the test below
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
    assert training_rows(output) == {}  # not asked for


def training_rows(output):
    """The training table's rows: `(precision, threads) -> [tokens/s, x float32, loss difference]`."""
    rows = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in ("float32", "bfloat16"):
            assert (cells[0], int(cells[1])) not in rows, line
            rows[cells[0], int(cells[1])] = cells[2:]
    return rows


def number(cell):
    return float(cell.replace(",", ""))


@pytest.mark.parametrize("cpu", ["no-bfloat16-units", "emulated", "bfloat16-units"])
def test_the_training_table_measures_a_step_per_precision(capsys, monkeypatch, cpu):
    from benchmarks import precision
    from elmoc_allennlp.training import mixed_precision

    flags = {"avx2", "amx_bf16"} if cpu == "bfloat16-units" else {"avx2"}
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(precision_module, "torch_cpu_capability", lambda: "AVX2")
    if cpu == "emulated":
        monkeypatch.setenv(precision_module.EMULATE_BFLOAT16, "1")
    else:
        monkeypatch.delenv(precision_module.EMULATE_BFLOAT16, raising=False)
    # The benchmark runs the trainer's own context: each forward pass's autocast dtype, recorded.
    entered = []
    autocast = mixed_precision.autocast

    def recording_autocast(device, dtype):
        entered.append(dtype)
        return autocast(device, dtype)

    monkeypatch.setattr(mixed_precision, "autocast", recording_autocast)

    assert precision.main(["--quick", "--tables", "training", "--threads", "1", "2"]) == 0
    output = capsys.readouterr().out
    assert "ELMo-C float32" not in output  # the inference tables were not asked for
    rows = training_rows(output)
    assert set(rows) == {(p, t) for p in ("float32", "bfloat16") for t in (1, 2)}
    for threads in (1, 2):
        tokens, ratio, difference = rows["float32", threads]
        assert number(tokens) > 0 and number(ratio) == 1.0 and difference.startswith("0")
        tokens, ratio, difference = rows["bfloat16", threads]
        if cpu == "no-bfloat16-units":
            # Ran as float32: no figure of its own, and the row says why.
            assert "ran as float32" in tokens and "do not apply" in tokens
            assert not ratio and not difference
        else:
            # bfloat16's numerics: the same batch's loss within bfloat16's precision of float32's,
            # and not float32's exactly (the products ran in bfloat16).
            assert 0 < number(difference) < 1e-2
        if cpu == "emulated":
            assert "emulated" in tokens and "no speed figure" in tokens and ratio == "-"
        if cpu == "bfloat16-units":
            speed = number(tokens)
            assert speed > 0 and number(ratio) == pytest.approx(
                speed / number(rows["float32", threads][0]), rel=0.05, abs=0.01
            )
    ran_bfloat16 = cpu != "no-bfloat16-units"
    # Per thread count: warm-up + one timed step per precision that ran.
    assert entered.count(None) == 2 * 2
    assert entered.count(torch.bfloat16) == (2 * 2 if ran_bfloat16 else 0)
