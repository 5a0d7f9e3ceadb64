"""Packing by length and the concurrent runner of the fast LSTM path."""

import threading

import pytest
import torch

from elmoc_allennlp.modules.seq2seq_encoders.lstm_recurrence import ConcurrentRunner, pack_by_length


def test_pack_by_length_layout_and_round_trip():
    lengths = torch.tensor([2, 3, 0, 1])
    mask = torch.arange(4).unsqueeze(0) < lengths.unsqueeze(1)
    packing = pack_by_length(mask)
    assert packing.order.tolist() == [1, 0, 3, 2]  # longest first, stable
    assert packing.batch_sizes == [3, 2, 1]
    assert packing.offsets == [0, 3, 5]
    assert packing.num_rows == 6
    # Rows: (t=0: b1, b0, b3), (t=1: b1, b0), (t=2: b1); flat index b * timesteps + t.
    assert packing.index.tolist() == [4, 0, 12, 5, 1, 6]

    padded = torch.randn(4, 4, 3)
    packed = packing.pack(padded)
    torch.testing.assert_close(packed[2], padded[3, 0])
    unpacked = packing.unpack(packed)
    torch.testing.assert_close(unpacked[mask], padded[mask])
    assert (unpacked[~mask] == 0).all()
    assert torch.equal(packing.sort_batch(torch.arange(4)), torch.tensor([1, 0, 3, 2]))


def test_pack_by_length_rejects_inner_padding_and_handles_empty_batches():
    assert pack_by_length(torch.tensor([[True, False, True]])) is None
    empty = pack_by_length(torch.zeros(2, 3, dtype=torch.bool))
    assert empty.num_rows == 0 and empty.batch_sizes == []


def test_pack_and_unpack_are_differentiable():
    mask = torch.tensor([[True, True, False], [True, True, True]])
    packing = pack_by_length(mask)
    padded = torch.randn(2, 3, 2, requires_grad=True)
    (packing.unpack(packing.pack(padded) * 2.0) ** 2).sum().backward()
    torch.testing.assert_close(padded.grad, 8.0 * padded.detach() * mask.unsqueeze(-1))


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def test_concurrent_runner_runs_tasks_in_threads_with_a_share_of_intra_op_threads(two_threads):
    runner = ConcurrentRunner()
    if not runner.is_concurrent(2):
        pytest.skip("per-thread intra-op thread limits are not available with this build")

    def task(value):
        def run():
            return value, threading.get_ident(), torch.get_num_threads(), torch.is_grad_enabled()

        return run

    results = runner.run([task("a"), task("b")])
    assert [value for value, *_ in results] == ["a", "b"]
    assert results[0][1] == threading.get_ident() != results[1][1]
    assert [threads for _, _, threads, _ in results] == [1, 1]
    assert not any(grad for *_, grad in results)
    # The caller's thread count is restored.
    assert torch.get_num_threads() == 2


def test_sequential_runner_and_errors(two_threads):
    sequential = ConcurrentRunner(enabled=False)
    assert not sequential.is_concurrent(2)
    results = sequential.run([lambda: threading.get_ident(), lambda: torch.get_num_threads()])
    assert results == [threading.get_ident(), 2]

    def fail():
        raise KeyError("boom")

    for runner in (ConcurrentRunner(), sequential):
        with pytest.raises(KeyError, match="boom"):
            runner.run([lambda: 1, fail])
        assert torch.get_num_threads() == 2
