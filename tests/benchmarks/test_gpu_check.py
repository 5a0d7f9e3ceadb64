"""
`benchmarks/gpu_check.py` cannot rot: its dry run (tiny sizes, CPU, the code paths that need no
CUDA) runs here, and the results it leaves are checked for what a GPU run must report.
"""

import json

import pytest
import torch

from benchmarks import encoder_speed, gpu_check
from tests.conftest import FIXTURES_ROOT
from tests.fresh_process import run_python

REPO_ROOT = FIXTURES_ROOT.parents[1]


def check_format(out):
    """Both files are there; every section reported, or recorded why not; units are named."""
    document = json.loads((out / gpu_check.RESULTS_JSON).read_text())
    assert document["format"] == gpu_check.FORMAT_VERSION and document["finished"] is True
    assert (
        isinstance(document["seconds"], float) and document["seconds"] <= document["budget_seconds"]
    )
    assert {"seconds", "words_per_second", "sentences_per_second", "peak_memory_mib"} <= set(
        document["units"]
    )
    markdown = (out / gpu_check.RESULTS_MD).read_text()
    for name, record in document["sections"].items():
        assert record["status"] in gpu_check.STATUSES, name
        assert isinstance(record["seconds"], float) and record["seconds"] >= 0, name
        if record["status"] == "ok":
            assert isinstance(record["results"], dict) and record["results"], name
        else:
            assert record["reason"].strip(), f"{name} {record['status']} without a reason"
        assert f"| {name} | {record['status']} |" in markdown
    return document


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """
    The results of `gpu_check.py --dry-run`.

    Slow (~19 s, once per module): the dry run runs every section for real at tiny sizes on the
    CPU, `pytest tests/gpu/test_cuda.py` in a subprocess among them, because a section that only
    runs on a GPU session would otherwise rot unseen.
    """
    out = tmp_path_factory.mktemp("gpu_check")
    assert gpu_check.main(["--dry-run", "--out", str(out), "--work-dir", str(out)]) == 0
    return check_format(out)


def test_the_dry_run_is_green_and_reports_every_section(dry_run):
    """
    Every section of the dry run is reported, in order, and passes.

    Slow (~19 s, in the module-scoped `dry_run` setup): the whole `gpu_check.py --dry-run` runs,
    each section at tiny sizes on the CPU, because the script a GPU session relies on must run end
    to end.
    """
    sections = dry_run["sections"]
    assert list(sections) == gpu_check.SECTIONS
    assert {name: record["status"] for name, record in sections.items()} == dict.fromkeys(
        gpu_check.SECTIONS, "ok"
    )
    assert dry_run["dry_run"] is True and dry_run["device"] == "cpu"


def test_the_dry_run_measures_what_the_gpu_run_reports(dry_run):
    results = {name: record["results"] for name, record in dry_run["sections"].items()}
    assert (
        results["environment"]["torch"] == torch.__version__ and results["environment"]["allennlp"]
    )
    # The GPU tests were collected and skipped here (no CUDA), none failed.
    counts = results["cuda_tests"]["counts"]
    assert counts["failed"] == 0 and counts["skipped"] >= 4
    recurrence = results["recurrence"]["dtypes"]
    assert recurrence["float32"]["status"] == "ok"
    assert recurrence["float32"]["fast_vs_reference"]["output"] <= gpu_check.TOLERANCE["float32"]
    assert (
        recurrence["float16"]["status"] == "skipped" and "CUDA" in recurrence["float16"]["reason"]
    )
    amp = results["amp_step"]
    assert amp["float32"]["status"] == amp["bfloat16"]["status"] == "ok"
    assert amp["float32"]["gradients_finite"] is amp["bfloat16"]["gradients_finite"] is True
    # The same weights and batch: bfloat16's loss near float32's, the difference its own.
    reference = amp["float32"]["loss"]
    difference = amp["bfloat16"]["loss_relative_difference_to_float32"]
    assert difference == pytest.approx(abs(amp["bfloat16"]["loss"] - reference) / abs(reference))
    assert 0 < difference < 0.05
    assert amp["float32"]["seconds_per_step"] > 0 and amp["bfloat16"]["seconds_per_step"] > 0
    # No native bfloat16 on a dry run's CPU (here): emulated, so no speed-up is claimed.
    assert amp["bfloat16"]["emulated"] and amp["bfloat16"]["speedup_over_float32"] is None
    assert amp["float16"]["status"] == "skipped" and "CUDA" in amp["float16"]["reason"]
    # Table 4: one row per model, ELMo-C the reference of every ratio.
    rows = {row["model"]: row for row in results["table4"]["rows"]}
    assert list(rows) == ["ELMo-C", "ELMo", "ELMo-A", "Subword", "Fixed"]
    assert rows["ELMo-C"]["time_ratio_to_elmoc"] == pytest.approx(1.0)
    for row in rows.values():
        assert row["words_per_second"] > 0 and row["batch"] >= 1
        expected = rows["ELMo-C"]["words_per_second"] / row["words_per_second"]
        assert row["time_ratio_to_elmoc"] == pytest.approx(expected)
    assert rows["ELMo"]["paper_time_ratio"] == 4.2 and rows["ELMo-A"]["paper_time_ratio"] == 1.47
    (encoder_rows,) = results["encoder"]["shapes"].values()
    methods = {row["method"]: row for row in encoder_rows}
    assert methods["nn.LSTM(proj_size)"]["ratio_to_nn_lstm"] == pytest.approx(1.0)
    assert all(row["ms"] > 0 for row in encoder_rows)
    embed = results["embed"]
    assert set(embed["sentences_per_second"]) == {"ELMo-C", "ELMo"}
    assert embed["ratio_elmoc_to_elmo"] == pytest.approx(
        embed["sentences_per_second"]["ELMo-C"] / embed["sentences_per_second"]["ELMo"]
    )


def test_amp_step_runs_bfloat16_as_the_trainer_does(tmp_path, monkeypatch):
    """`amp_step`'s bfloat16 goes through `trainer.precision`'s decision and context."""
    from elmoc_allennlp.training import mixed_precision

    decided, entered = [], []
    decide, autocast = mixed_precision.training_autocast_dtype, mixed_precision.autocast

    def recording_decide(precision, device, use_amp):
        decided.append((precision, torch.device(device).type, use_amp))
        return decide(precision, device, use_amp)

    def recording_autocast(device, dtype):
        entered.append(dtype)
        return autocast(device, dtype)

    monkeypatch.setattr(mixed_precision, "training_autocast_dtype", recording_decide)
    monkeypatch.setattr(mixed_precision, "autocast", recording_autocast)
    gpu_check.main(["--dry-run", "--out", str(tmp_path), "--sections", "amp_step"])
    results = check_format(tmp_path)["sections"]["amp_step"]["results"]
    assert decided == [("bfloat16", "cpu", False)]
    # float32 and bfloat16: a warm-up step and one timed step each, in the trainer's context.
    assert entered == [None, None, torch.bfloat16, torch.bfloat16]
    assert results["bfloat16"]["loss"] != results["float32"]["loss"]


def test_a_failing_section_is_recorded_and_the_others_still_report(tmp_path, monkeypatch):
    def broken(ctx):
        raise ValueError("planted")

    monkeypatch.setitem(gpu_check.FUNCTIONS, "recurrence", broken)
    gpu_check.main(
        ["--dry-run", "--out", str(tmp_path), "--sections", "environment", "recurrence", "amp_step"]
    )
    sections = check_format(tmp_path)["sections"]
    assert sections["recurrence"]["status"] == "failed"
    assert (
        "ValueError: planted" in sections["recurrence"]["reason"]
        and "planted" in sections["recurrence"]["traceback"]
    )
    assert sections["environment"]["status"] == sections["amp_step"]["status"] == "ok"


def test_without_allennlp_the_torch_sections_run_and_the_others_say_why(tmp_path):
    # The device image has torch but not allennlp: `None` in sys.modules makes its import fail.
    code = (
        "import sys; sys.modules['allennlp'] = None; from benchmarks import gpu_check; "
        f"gpu_check.main(['--dry-run', '--out', {str(tmp_path)!r}, "
        "'--sections', 'environment', 'recurrence', 'encoder'])"
    )
    completed = run_python(["-c", code], cwd=REPO_ROOT, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    sections = check_format(tmp_path)["sections"]
    assert sections["environment"]["status"] == "ok"
    assert sections["environment"]["results"]["allennlp"] is None
    assert (
        sections["recurrence"]["status"] == "skipped"
        and "allennlp" in sections["recurrence"]["reason"]
    )
    # The torch-only baseline still measured, the rest of the section said why not.
    assert sections["encoder"]["status"] == "failed" and "allennlp" in sections["encoder"]["reason"]
    assert sections["encoder"]["results"]["nn_lstm_only"]["tiny"]["ms"] > 0


def test_the_encoder_shapes_are_the_benchmarks():
    for name, (batch, timesteps, projection, cell) in gpu_check.ENCODER_SHAPE_SIZES.items():
        shape = encoder_speed.SHAPES[name]
        assert (shape.batch, shape.timesteps, shape.projection, shape.cell) == (
            batch,
            timesteps,
            projection,
            cell,
        )
    assert set(gpu_check.ENCODER_SHAPES) == set(gpu_check.ENCODER_SHAPE_SIZES)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--out", str(tmp_path), "--device", "cuda"])
    assert "no CUDA device is available" in capsys.readouterr().err
