"""The C kernels equal the PyTorch-operations kernels, and failing to build them falls back."""
import logging
import os
import shutil
import time

import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.modules.seq2seq_encoders import fused_lstm_cell, layer_norm_lstm
from elmoc_allennlp.modules.seq2seq_encoders.fused_lstm_cell import (
    TorchLstmCellKernels,
    build_native_lstm_cell_kernels,
    native_lstm_cell_kernels,
)
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import ElmocLstm

NATIVE = native_lstm_cell_kernels()  # built on this machine's first use, then cached
needs_native = pytest.mark.skipif(NATIVE is None, reason="native LSTM kernels unavailable")


def step(kernels, dtype, n, n_prev, C, P, layer_norm, dropout, cell_clip, projection_clip):
    """One forward and backward step; returns every buffer the kernels wrote."""
    g = torch.Generator().manual_seed(n * 100 + n_prev)

    def rand(*size, scale=2.0):
        return (scale * torch.randn(*size, generator=g, dtype=torch.float64)).to(dtype)

    gates, c_prev, h = rand(n, 4 * C), rand(n_prev, C), rand(n, P)
    weight, bias = (rand(P), rand(P)) if layer_norm else (None, None)
    drop = (rand(n, P) > 0).to(dtype) * 1.5 if dropout else None
    out = {
        "gates": gates.clone(),
        "cell": torch.full((n, C), float("nan"), dtype=dtype),
        "m": torch.full((n, C), float("nan"), dtype=dtype),
        "h": h.clone(),
        "out": torch.full((n, P), float("nan"), dtype=dtype),
        "next": torch.full((max(n - 1, 0), P), float("nan"), dtype=dtype),
        "mean": torch.zeros(n, dtype=dtype),
        "rstd": torch.zeros(n, dtype=dtype),
        "grad_weight": torch.zeros(P, dtype=torch.float64) if layer_norm else None,
        "grad_bias": torch.zeros(P, dtype=torch.float64) if layer_norm else None,
        "grad_h": torch.full((n, P), float("nan"), dtype=dtype),
        "carry": rand(n, C),
        "grad_gates": torch.full((n, 4 * C), float("nan"), dtype=dtype),
    }
    kernels.cell_forward(out["gates"], c_prev, out["cell"], out["m"], cell_clip)
    kernels.norm_forward(
        out["h"], weight, bias, 1e-5, drop, out["out"], out["next"], out["mean"], out["rstd"],
        projection_clip,
    )
    kernels.norm_backward(
        rand(n, P), rand(n, P), drop, out["h"], out["mean"], out["rstd"], weight,
        out["grad_weight"], out["grad_bias"], out["grad_h"], projection_clip,
    )
    kernels.cell_backward(
        rand(n, C), out["carry"], out["gates"], out["cell"], c_prev, out["grad_gates"], cell_clip
    )
    if not layer_norm:
        del out["mean"], out["rstd"]
    # Rows >= n_prev of the carried cell gradient are not meaningful (no previous cell).
    out["carry"] = out["carry"][:n_prev]
    return out


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n,n_prev", [(4, 4), (5, 2), (3, 0), (1, 1)])
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("dropout", [True, False])
@pytest.mark.parametrize("clips", [(0.5, 2.0), (None, None)])
def test_native_kernels_equal_torch_kernels(dtype, n, n_prev, layer_norm, dropout, clips):
    native = native_lstm_cell_kernels()
    args = (dtype, n, n_prev, 37, 9, layer_norm, dropout, *clips)
    expected = step(TorchLstmCellKernels(), *args)
    actual = step(native, *args)
    tolerance = 2e-6 if dtype == torch.float32 else 1e-12
    for name, value in expected.items():
        if value is None:
            assert actual[name] is None
            continue
        assert not actual[name].isnan().any(), name
        torch.testing.assert_close(actual[name], value, atol=tolerance, rtol=tolerance, msg=name)
    if clips[0] is not None:
        assert actual["cell"].abs().max() == clips[0]  # the cell clip was active


@needs_native
def test_native_tanh_and_sigmoid_are_accurate_in_float32():
    """The float kernels use their own exp; check it against float64 over a wide range."""
    x = torch.cat([torch.linspace(-30, 30, 4001), torch.logspace(-8, 0, 401)]).view(1, -1)
    C = x.size(1)
    gates = x.repeat(1, 4).float()
    native_lstm_cell_kernels().cell_forward(
        gates, torch.zeros(0, C), torch.empty(1, C), torch.empty(1, C), None
    )
    x = x.double()
    expected = torch.cat([x.sigmoid(), x.sigmoid(), x.tanh(), x.sigmoid()], dim=1)
    error = (gates.double() - expected).abs() / expected.abs().clamp(min=1e-30)
    assert error.max() < 4e-7  # a few float32 ulps, also for tanh of tiny values


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """A clean slate for `native_lstm_cell_kernels` with an empty cache folder."""
    monkeypatch.setattr(fused_lstm_cell, "_loaded", None)
    monkeypatch.setattr(fused_lstm_cell, "_attempted", False)
    monkeypatch.setenv("ELMOC_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ELMOC_DISABLE_NATIVE_KERNELS", raising=False)
    return tmp_path


@pytest.mark.parametrize("compiler", ["/nonexistent/cc", "false"])
def test_build_failure_falls_back_to_torch_kernels(fresh_loader, monkeypatch, caplog, compiler):
    monkeypatch.setenv("CC", compiler)

    def which(name):  # no other compiler to fall back to
        return "/bin/false" if name == "false" else None

    monkeypatch.setattr(fused_lstm_cell.shutil, "which", which)
    with caplog.at_level(logging.WARNING, logger=fused_lstm_cell.__name__):
        assert native_lstm_cell_kernels() is None
    assert "Could not build the native LSTM cell kernels" in caplog.text
    caplog.clear()
    assert native_lstm_cell_kernels() is None  # tried once, warned once
    assert caplog.text == ""

    # The default implementation still works, and computes the same as the reference.
    torch.manual_seed(0)
    encoder = ElmocLstm(5, 4, 6, implementation="reference")
    inputs = torch.randn(3, 4, 5)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]).bool()
    expected = encoder(inputs, mask)
    encoder.implementation = "auto"
    assert layer_norm_lstm._select_kernels("auto", inputs) is layer_norm_lstm._TORCH_KERNELS
    torch.testing.assert_close(encoder(inputs, mask), expected, atol=1e-5, rtol=1e-5)
    # Asking for the native kernels explicitly is a configuration error.
    with pytest.raises(ConfigurationError, match="implementation 'native' needs the C kernels"):
        ElmocLstm(5, 4, 6, implementation="native")


def test_disabled_by_environment(fresh_loader, monkeypatch):
    monkeypatch.setenv("ELMOC_DISABLE_NATIVE_KERNELS", "1")
    assert native_lstm_cell_kernels() is None


@needs_native
def test_build_uses_the_cache(fresh_loader, monkeypatch):
    """A library built from the same source, flags and compiler is loaded, not rebuilt."""
    built = NATIVE.path
    cache = fresh_loader / "cache"
    cache.mkdir()
    shutil.copy(built, cache / built.name)
    calls = []
    real_run = fused_lstm_cell.subprocess.run

    def recording_run(args, **kwargs):
        calls.append(args)
        return real_run(args, **kwargs)

    monkeypatch.setattr(fused_lstm_cell.subprocess, "run", recording_run)
    long_ago = time.time() - 2 * fused_lstm_cell.STALE_LIBRARY_SECONDS
    os.utime(cache / built.name, (long_ago, long_ago))
    kernels = build_native_lstm_cell_kernels(cache_dir=cache)
    assert kernels.path == cache / built.name
    # Loading marks it as in use, so that a later build does not prune it.
    assert time.time() - kernels.path.stat().st_mtime < 600
    assert calls and all("--version" in args for args in calls)  # identified, did not compile
    # A library from another source version would have another name: rebuilt, not reused.
    assert len(built.stem.rsplit("_", 1)[-1]) == 20


def test_stale_libraries_of_other_builds_are_pruned(tmp_path):
    """Libraries from older sources or other compilers go once unused for 30 days."""
    long_ago = time.time() - 2 * fused_lstm_cell.STALE_LIBRARY_SECONDS
    names = ["elmoc_lstm_kernels_old.so", "elmoc_lstm_kernels_recent.so",
             "elmoc_lstm_kernels_current.so", "unrelated.so"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    for name in ("elmoc_lstm_kernels_old.so", "elmoc_lstm_kernels_current.so", "unrelated.so"):
        os.utime(tmp_path / name, (long_ago, long_ago))
    removed = fused_lstm_cell._remove_stale_libraries(
        tmp_path, keep=tmp_path / "elmoc_lstm_kernels_current.so"
    )
    assert removed == [tmp_path / "elmoc_lstm_kernels_old.so"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(names[1:])


@needs_native
def test_build_retries_without_per_cpu_versions(fresh_loader):
    """A toolchain that cannot build `target_clones` (e.g. no ifunc) still gets the kernels."""
    real = fused_lstm_cell._find_compiler()
    wrapper = fresh_loader / "cc-without-clones"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--version*|*ELMOC_NO_CLONES*) exec ' + real + ' "$@";; esac\n'
        'echo "target_clones unsupported" >&2; exit 1\n'
    )
    wrapper.chmod(0o755)
    cache = fresh_loader / "cache"
    kernels = build_native_lstm_cell_kernels(compiler=str(wrapper), cache_dir=cache)
    assert kernels.path.exists() and [path.name for path in cache.iterdir()] == [kernels.path.name]
    args = (torch.float32, 4, 3, 37, 9, True, True, 0.5, 2.0)
    expected = step(TorchLstmCellKernels(), *args)
    for name, value in step(kernels, *args).items():
        if value is not None:
            torch.testing.assert_close(value, expected[name], atol=2e-6, rtol=2e-6, msg=name)


@needs_native
def test_self_test_rejects_wrong_kernels():
    class Broken(type(native_lstm_cell_kernels())):
        def cell_backward(self, grad_m, grad_carry, act, cell, c_prev, grad_gates, cell_clip):
            super().cell_backward(grad_m, grad_carry, act, cell, c_prev, grad_gates, cell_clip)
            grad_gates[0, 0] += 1e-3

    native = native_lstm_cell_kernels()
    broken = Broken.__new__(Broken)
    broken.__dict__.update(native.__dict__)
    with pytest.raises(RuntimeError, match="self-test failed .* 'grad_gates'"):
        fused_lstm_cell._self_test(broken)
