"""The efficiency benchmark (benchmarks/output_layers.py), at toy sizes."""

import json
from pathlib import Path

import pytest

from benchmarks import output_layers
from benchmarks.common import random_fasttext

REPO_ROOT = Path(__file__).resolve().parents[2]

TOY = [
    "--cell-dim",
    "12",
    "--projection-dim",
    "8",
    "--embedding-dim",
    "10",
    "--vocab-sizes",
    "9000",
    "--seq-len",
    "6",
    "--tokens",
    "200",
    "--max-batch",
    "16",
    "--memory-batch",
    "8",
    "--subword-vocab",
    "300",
    "--fasttext-words",
    "500",
    "--fasttext-bucket",
    "1000",
    "--repeats",
    "1",
    "--device",
    "cpu",
]


def toy_job(tmp_path, kind, vocab_size):
    args = output_layers.parse_args(TOY + ["--work-dir", str(tmp_path)])
    sizes = dict(output_layers.SIZES["default"])
    for key in (
        "cell_dim",
        "projection_dim",
        "embedding_dim",
        "vocab_sizes",
        "seq_len",
        "tokens",
        "max_batch",
        "memory_batch",
        "subword_vocab",
    ):
        sizes[key] = getattr(args, key)
    path = random_fasttext(tmp_path / "ft.bin", 500, 1000, 10, scale=0.1)
    jobs = output_layers.make_jobs(args, sizes, path)
    return next(job for job in jobs if job["kind"] == kind and job["vocab_size"] == vocab_size)


@pytest.mark.parametrize(
    "kind,vocab_size", [("cont", None), ("sampled", 9002), ("fixed", 9002), ("subword", 304)]
)
def test_worker_measures_a_real_training_step(tmp_path, kind, vocab_size):
    job = toy_job(tmp_path, kind, vocab_size)
    result = output_layers.run_worker(job)
    assert result["params"] > 0
    for clock in ("wall", "cpu"):
        assert result["s1"][clock] > 0 and result["s2"][clock] > 0
        assert 0 <= result["output_share"][clock] <= 1
    assert result["batch"] == 16  # toy models fit the budget up to the cap
    assert set(result["peaks"]) >= {8, 16}
    assert result["s2_steps"] >= 2
    if kind == "cont":
        # Encoder 75.7M-style arithmetic at toy size: the head is 8 -> 10 (+ bias).
        assert result["output_params"] == 8 * 10 + 10
    if kind == "sampled":
        assert result["output_params"] == 9002 * 8 + 9002
    if kind == "fixed":
        assert result["output_params"] == 8 * 10 + 10 + 9002  # projection + bias, frozen table


def test_adaptive_cutoffs_scale_with_the_vocabulary(tmp_path):
    job = toy_job(tmp_path, "adaptive", 9002)
    assert job["cutoffs"] == [2250, 4500, 6750] and job["div_value"] == 1.0
    args = output_layers.parse_args(["--work-dir", str(tmp_path)])
    sizes = output_layers.SIZES["default"]
    jobs = output_layers.make_jobs(args, sizes, tmp_path / "unused.bin")
    adaptive = {
        job["vocab_size"]: (job["cutoffs"], job["div_value"])
        for job in jobs
        if job["kind"] == "adaptive"
    }
    assert adaptive[2_000_002] == ([100_000, 400_000, 1_850_000], 4.0)
    kinds = [job["kind"] for job in jobs]
    assert kinds.count("sampled") == 3 and kinds.count("full") == 1 and kinds[0] == "cont"


def test_every_figure_is_a_ratio_to_cont_measured_in_the_same_run():
    jobs = [
        {"kind": "cont", "vocab_size": None},
        {"kind": "sampled", "vocab_size": 800_002},
        {"kind": "adaptive", "vocab_size": 40_002},
        {"kind": "fixed", "vocab_size": 800_002},
    ]
    base = dict(
        params=1_000_000,
        batch=64,
        s1={"wall": 0.5, "cpu": 0.9},
        s2={"wall": 10.0, "cpu": 20.0},
        mem=100 * 2**20,
        output_share={"wall": 0.1, "cpu": 0.2},
        words_per_second={"wall": 100.0, "cpu": 50.0},
    )
    sampled = dict(
        base,
        params=2_000_000,
        batch=16,
        s2={"wall": 25.0, "cpu": 30.0},
        mem=300 * 2**20,
        words_per_second={"wall": 40.0, "cpu": 10.0},
    )
    results = [base, sampled, {"error": "timeout after 5s"}, base]
    cont, sampled_row, failed, fixed = output_layers.table_rows(jobs, results, "wall")
    assert cont["ratios"] == dict.fromkeys(cont["ratios"], 1.0)
    assert sampled_row["ratios"] == pytest.approx(
        {"params": 2.0, "batch": 0.25, "mem": 3.0, "s1": 1.0, "s2": 2.5, "words_per_second": 0.4}
    )
    assert sampled_row["output_share"] == 0.1
    # The paper's S2 ratios where Table 4 has the row ("800K" = 800,000 or 793,471 words).
    assert (sampled_row["paper_s2_ratio"], fixed["paper_s2_ratio"], cont["paper_s2_ratio"]) == (
        1.35,
        1.24,
        None,
    )
    assert failed["error"] == "timeout after 5s" and "ratios" not in failed
    assert (
        output_layers.table_rows([{"kind": "adaptive", "vocab_size": 793_473}], [base], "wall")[0][
            "paper_s2_ratio"
        ]
        == 1.47
    )
    # The CPU clock gives CPU-time ratios; without a Cont result there is nothing to divide by.
    assert output_layers.table_rows(jobs, results, "cpu")[1]["ratios"]["s2"] == pytest.approx(1.5)
    assert output_layers.table_rows(jobs[1:2], results[1:2], "wall")[0]["ratios"]["s2"] is None
    # The Markdown table shows one line per row, the failure named, and the whole-model table
    # only when both ELMo-C and ELMo ran.
    table = output_layers.format_table(jobs, results, {"memory_batch": 32}, "wall")
    assert len([line for line in table.splitlines() if line.startswith("| ")]) == 1 + len(
        jobs
    )  # header + rows
    assert "timeout after 5s" in table and "Whole models" not in table


def test_command_prints_the_table(tmp_path, monkeypatch, capsys):
    """The command's `main`, in this process, from the repository root (each layer's job still runs
    in a process of its own, as `python -m benchmarks.output_layers` starts it).

    Slow (~9 s): the Cont layer's job starts a process of its own (torch, allennlp, a toy fastText
    model, timed training steps), because the benchmark measures each layer apart and the table
    printed from real measurements is what is checked."""
    out = tmp_path / "results.json"
    monkeypatch.chdir(REPO_ROOT)
    output_layers.main([*TOY, "--only", "cont", "--work-dir", str(tmp_path), "--output", str(out)])
    printed = capsys.readouterr()
    assert "| Cont | open |" in printed.out and "Machine:" in printed.out
    results = json.loads(out.read_text())
    assert [job["kind"] for job in results["jobs"]] == ["cont"]
    assert all("error" not in result for result in results["results"]), (
        results["results"],
        printed.err[-3000:],
    )
