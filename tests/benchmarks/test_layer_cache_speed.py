"""`benchmarks/layer_cache_speed.py` leaves no temporary folder behind."""

import pytest


def test_layer_cache_benchmark_removes_its_temporary_folder(tmp_path, monkeypatch):
    """Its runs and caches (about 478 MB at the default sizes) go, however the run ends."""
    from benchmarks import layer_cache_speed

    data = tmp_path / "conll2003"
    data.mkdir()
    for name in ("eng.train", "eng.testa"):
        (data / name).write_text("")
    used = []

    def measure(args, work):
        used.append(work)
        (work / "run").mkdir()
        (work / "run" / "weights.th").write_bytes(b"0" * 1024)
        raise KeyboardInterrupt

    monkeypatch.setattr(layer_cache_speed, "measure", measure)
    monkeypatch.setattr(layer_cache_speed.torch, "set_num_threads", lambda threads: None)
    with pytest.raises(KeyboardInterrupt):
        layer_cache_speed.main(["--data", str(data)])
    assert len(used) == 1 and not used[0].exists()
    # A --work-dir is the user's: kept.
    kept = tmp_path / "kept"
    with pytest.raises(KeyboardInterrupt):
        layer_cache_speed.main(["--data", str(data), "--work-dir", str(kept)])
    assert used[1] == kept and (kept / "run" / "weights.th").exists()
