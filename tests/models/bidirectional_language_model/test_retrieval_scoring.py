"""
`retrieval_accuracy` scored in bounded memory: predictions in chunks of rows, against the distinct
target vectors in evaluation, with the same result as the full `predictions x targets` matrix.
"""

import json
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmarks.retrieval_scoring import full_matrix_accuracy  # the metric as first written
from elmoc_allennlp.models import bilm_metrics as bilm_module
from elmoc_allennlp.models.bilm_metrics import retrieval_accuracy
from tests.conftest import LM_CORPUS
from tests.fresh_process import run_python
from tests.models.bidirectional_language_model.test_no_host_syncs import (
    _NoTableReads,
    _model_and_batch,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


def _repeated_words(num_positions=600, num_words=40, dim=8, seed=0):
    """A batch of few distinct words; word 0 is the zero vector and word 1 is -0.0 everywhere."""
    generator = torch.Generator().manual_seed(seed)
    words = torch.randn(num_words, dim, generator=generator)
    words[0] = 0.0
    words[1] = -0.0
    targets = words[torch.randint(num_words, (num_positions,), generator=generator)]
    predictions = targets + 0.6 * torch.randn(num_positions, dim, generator=generator)
    return predictions, targets


def _distinct_words(num_positions=600, dim=8, seed=1):
    generator = torch.Generator().manual_seed(seed)
    targets = torch.randn(num_positions, dim, generator=generator)
    return targets + 0.6 * torch.randn(num_positions, dim, generator=generator), targets


@pytest.mark.parametrize("data", [_repeated_words, _distinct_words], ids=["repeated", "distinct"])
@pytest.mark.parametrize("budget", [1, 250, 2**22], ids=["one_row", "chunks", "default"])
@pytest.mark.parametrize("deduplicate", [True, False], ids=["eval", "train"])
def test_chunked_and_deduplicated_equals_the_full_matrix(monkeypatch, data, budget, deduplicate):
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", budget)
    predictions, targets = data()
    expected = full_matrix_accuracy(predictions, targets, targets)
    assert 0.2 < expected.item() < 0.9  # neither all right nor all wrong: a change shows
    accuracy = retrieval_accuracy(predictions, targets, targets, deduplicate=deduplicate)
    assert accuracy.dtype == torch.float32 and accuracy.dim() == 0
    assert accuracy.item() == expected.item()


def test_candidates_are_each_distinct_vectors_first_position():
    _, targets = _repeated_words()
    earliest = {}
    for position, bits in enumerate(map(tuple, targets.view(torch.int32).tolist())):
        earliest.setdefault(bits, position)
    # 40 words: the zero and the -0.0 vector are two candidates (compared by bits).
    assert len(earliest) == 40
    assert bilm_module._first_occurrences(targets).tolist() == sorted(earliest.values())
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        assert bilm_module._first_occurrences(targets.to(dtype)).tolist() == sorted(
            earliest.values()
        )


def test_an_exact_tie_goes_to_the_earliest_target_as_in_the_full_matrix(monkeypatch):
    # [1, 0] is exactly as close (cos 1/sqrt 2) to [1, 1] as to [1, -1]; [1, 1] comes first in the
    # batch, [1, -1] first in `torch.unique`'s sorted order. The full matrix picks [1, 1].
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", 1)
    targets = torch.tensor([[1.0, 1.0], [1.0, -1.0], [1.0, 1.0], [1.0, -1.0]])
    predictions = torch.tensor([[2.0, 1.0], [1.0, 0.0], [1.0, 2.0], [3.0, -2.0]])
    scores = F.normalize(predictions, dim=-1) @ F.normalize(targets, dim=-1).t()
    assert scores[1, 0] == scores[1, 1]
    expected = full_matrix_accuracy(predictions, targets, targets)
    assert expected.item() == 0.75  # row 1 ([1, -1]'s prediction) retrieves [1, 1]
    assert retrieval_accuracy(predictions, targets, targets).item() == 0.75


def test_bfloat16_autocast_matches_the_full_matrix_within_rounding(monkeypatch):
    # bfloat16 scores tie often, and torch 1.12's CPU product rounds by shape: over 100 seeds a
    # chunk changed up to 4 of 600 retrievals there (none with torch 2.13). 12 leaves a margin.
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", 250)
    predictions, targets = _repeated_words()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        predictions = torch.nn.functional.linear(predictions, torch.eye(predictions.size(1)))
        assert predictions.dtype == torch.bfloat16
        expected = full_matrix_accuracy(predictions, targets, targets)
        accuracy = retrieval_accuracy(predictions, targets, targets)
    assert accuracy.dtype == torch.float32
    assert abs(accuracy.item() - expected.item()) <= 12 / len(targets)


def test_training_samples_as_before_and_chunks_without_a_host_read(monkeypatch):
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", 100)
    model, _ = _model_and_batch(gather=False)
    model.train()
    model._retrieval_sample_size = 50
    predictions, targets = _repeated_words(num_positions=300)
    torch.manual_seed(5)
    chosen = torch.randperm(300)[:50]
    expected = full_matrix_accuracy(predictions[chosen], targets[chosen], targets)
    torch.manual_seed(5)
    with _NoTableReads(monkeypatch):
        accuracy = model._retrieval_accuracy_of(predictions, targets)
    assert accuracy.item() == expected.item()


_MEMORY_SCRIPT = textwrap.dedent("""
    import json, resource
    import torch
    from tests.models.bidirectional_language_model.test_no_host_syncs import _model_and_batch

    model, _ = _model_and_batch(gather=False)
    model.eval()
    num_positions, num_words, dim = 30000, 300, 16
    generator = torch.Generator().manual_seed(0)
    words = torch.randn(num_words, dim, generator=generator)
    targets = words[torch.randint(num_words, (num_positions,), generator=generator)]
    predictions = targets + 0.5 * torch.randn(num_positions, dim, generator=generator)
    with torch.no_grad():
        model._retrieval_accuracy_of(predictions[:100], targets[:100])  # first-call allocations
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        accuracy = model._retrieval_accuracy_of(predictions, targets)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"growth_mb": (after - before) / 1024, "accuracy": accuracy.item()}))
    """)


def test_thirty_thousand_positions_are_scored_in_bounded_memory(tmp_path):
    """
    30,000 positions are scored in bounded memory, to a plausible accuracy.

    A fresh process (`tests/fresh_process.py`) builds the model and scores 30,000 positions: the
    bound is that process's peak memory at a size where the full matrix (3.6 GB) would show.
    """
    # The full matrix would be 30,000^2 float32 scores: 3.6 GB.
    result = run_python(["-c", _MEMORY_SCRIPT], cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["growth_mb"] < 400, measured
    assert 0.3 < measured["accuracy"] < 1.0, measured


def test_allennlp_evaluate_reports_the_full_matrix_accuracy(monkeypatch, elmoc_archive, tmp_path):
    # One line of 600 tokens (three 200-token instances in one batch), a budget that forces the
    # deduplicated, chunked path; the metric must be what the full matrix gives on the same vectors.
    from allennlp.commands.evaluate import evaluate_from_archive

    words = (LM_CORPUS / "valid.txt").read_text().split()
    line = tmp_path / "long_line.txt"
    line.write_text(" ".join(words[index % len(words)] for index in range(600)) + "\n")
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", 5000)
    calls = []
    original = bilm_module.retrieval_accuracy

    def recording(predictions, gold, targets, deduplicate=True):
        calls.append(
            (
                predictions.size(0),
                deduplicate,
                original(predictions, gold, targets, deduplicate).item(),
                full_matrix_accuracy(predictions, gold, targets).item(),
            )
        )
        return original(predictions, gold, targets, deduplicate)

    monkeypatch.setattr(bilm_module, "retrieval_accuracy", recording)
    metrics = evaluate_from_archive(str(elmoc_archive), str(line))
    assert len(calls) == 2  # one batch, two directions
    for num_positions, deduplicate, accuracy, expected in calls:
        assert num_positions > 590 and deduplicate and num_positions**2 > 5000
        assert accuracy == expected
    assert 0.0 < metrics["retrieval_accuracy"] < 1.0
    assert metrics["retrieval_accuracy"] == pytest.approx(
        sum(call[3] for call in calls) / 2, abs=1e-7
    )


def test_the_benchmark_measures_both_methods_on_the_same_data():
    from benchmarks.retrieval_scoring import _cell

    full, chunked = (_cell(method, 3000, 8, 50) for method in ("full", "chunked"))
    assert full["distinct"] == chunked["distinct"] <= 50
    assert full["accuracy"] == chunked["accuracy"] and 0.0 < full["accuracy"] < 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_matches_the_full_matrix_and_keeps_first_occurrences(monkeypatch, dtype):
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", 250)
    predictions, targets = (tensor.cuda() for tensor in _repeated_words())
    first = bilm_module._first_occurrences(targets.cpu()).tolist()
    for vectors in (targets, targets.half(), targets.bfloat16()):
        assert bilm_module._first_occurrences(vectors).tolist() == first
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        predictions = torch.nn.functional.linear(
            predictions, torch.eye(predictions.size(1), device="cuda")
        )
        expected = full_matrix_accuracy(predictions, targets, targets)
        accuracy = retrieval_accuracy(predictions, targets, targets)
    assert accuracy.dtype == torch.float32 and accuracy.device.type == "cuda"
    if dtype == torch.float32:
        assert accuracy.item() == expected.item()
    else:  # reduced-precision scores: a chunk may round a near tie the other way
        assert abs(accuracy.item() - expected.item()) <= 12 / len(targets)


# ---------------------------------------------------------------------- at the budget's boundaries
# Predictions are scored `RETRIEVAL_SCORE_BUDGET // candidates` rows at a time: k steps of rows
# minus one, exactly, plus one (k = 1, 2) must score every prediction once, as the full matrix
# does. Exact predictions (accuracy 1.0 exactly) show a row lost or scored twice; noisy ones
# compare each retrieval with the full matrix's.


def _boundary_batch(num_predictions, num_words, exact, seed=3):
    generator = torch.Generator().manual_seed(seed)
    words = torch.randn(num_words, 8, generator=generator)
    gold = words[torch.arange(num_predictions) % num_words]
    noise = 0.0 if exact else 0.8
    return gold + noise * torch.randn(gold.shape, generator=generator), gold


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "noisy"])
def test_rows_at_multiples_of_the_step_are_each_scored_once(monkeypatch, k, offset, exact):
    step, num_words = 4, 5
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", step * num_words)
    predictions, gold = _boundary_batch(k * step + offset, num_words, exact)
    targets = gold  # every word among the candidates: `num_words` distinct, repeated
    for deduplicate in (False, True):
        candidates = (
            num_words if deduplicate and len(targets) ** 2 > step * num_words else len(targets)
        )
        accuracy = retrieval_accuracy(predictions, gold, targets, deduplicate=deduplicate)
        if exact:
            assert accuracy.item() == 1.0, (deduplicate, candidates)
        else:
            assert accuracy.item() == full_matrix_accuracy(predictions, gold, targets).item()


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
def test_deduplication_starts_just_past_the_budget(monkeypatch, offset):
    num_predictions = 12
    budget = num_predictions**2 - offset  # the full matrix is budget + offset scores
    monkeypatch.setattr(bilm_module, "RETRIEVAL_SCORE_BUDGET", budget)
    predictions, gold = _boundary_batch(num_predictions, 5, exact=False)
    calls = []
    original = bilm_module._first_occurrences
    monkeypatch.setattr(
        bilm_module, "_first_occurrences", lambda t: calls.append(len(t)) or original(t)
    )
    accuracy = retrieval_accuracy(predictions, gold, gold)
    assert calls == ([num_predictions] if offset > 0 else [])
    assert accuracy.item() == full_matrix_accuracy(predictions, gold, gold).item()


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("k", [1, 2])
def test_the_real_budget_scores_every_row_once(k, offset):
    # 2048 distinct candidates: 2^22 // 2048 = 2048 rows a step.
    num_words = 2048
    assert bilm_module.RETRIEVAL_SCORE_BUDGET // num_words == 2048
    generator = torch.Generator().manual_seed(k)
    targets = torch.randn(num_words, 8, generator=generator)
    gold = targets[torch.randint(num_words, (k * 2048 + offset,), generator=generator)]
    exact = retrieval_accuracy(gold.clone(), gold, targets, deduplicate=False)
    assert exact.item() == 1.0
    noisy = gold + 0.3 * torch.randn(gold.shape, generator=generator)
    accuracy = retrieval_accuracy(noisy, gold, targets, deduplicate=False)
    assert accuracy.item() == full_matrix_accuracy(noisy, gold, targets).item()


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
def test_training_scores_every_prediction_up_to_the_sample_size(monkeypatch, offset):
    model, _ = _model_and_batch(gather=False)
    model.train()
    model._retrieval_sample_size = 6
    predictions, targets = _repeated_words(num_positions=6 + offset)
    scored = []
    monkeypatch.setattr(
        bilm_module,
        "retrieval_accuracy",
        lambda p, g, t, deduplicate=True: scored.append((p, g, t)) or torch.tensor(0.0),
    )
    model._retrieval_accuracy_of(predictions, targets)
    ((chosen, gold, candidates),) = scored
    assert torch.equal(candidates, targets)
    if offset <= 0:  # all of them, in order
        assert torch.equal(chosen, predictions) and torch.equal(gold, targets)
    else:  # 6 distinct positions, each with its own target
        rows = [int((predictions == row).all(-1).nonzero()[0]) for row in chosen]
        assert len(set(rows)) == 6 and torch.equal(gold, targets[rows])
