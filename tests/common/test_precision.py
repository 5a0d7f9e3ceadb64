"""`elmoc_allennlp.common.precision`: the names, native bfloat16 detection, preparing an encoder."""

import logging

import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common import precision
from elmoc_allennlp.common.precision import check_dtype, native_bfloat16, prepare_encoder
from elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm import LayerNormLstm


@pytest.fixture
def cpu_without_bfloat16(monkeypatch):
    """An AVX2 CPU (this project's machines): no avx512_bf16 or amx_bf16."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(precision, "torch_cpu_capability", lambda: "AVX2")


@pytest.fixture
def cpu_with_bfloat16(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))


def test_a_dtype_typo_is_an_error_with_the_nearest_name():
    for name in ("float32", "bfloat16", "int8"):
        check_dtype(name, "--dtype")
    with pytest.raises(
        ConfigurationError, match=r"--dtype .* 'bfloat61' \(did you mean 'bfloat16'\?\)"
    ):
        check_dtype("bfloat61", "--dtype")
    with pytest.raises(ConfigurationError, match=r"dtype .* 'int4' \(did you mean 'int8'\?\)"):
        check_dtype("int4", "dtype")


def test_native_bfloat16_follows_the_cpu_flags(monkeypatch, cpu_without_bfloat16):
    native, evidence = native_bfloat16("cpu")
    assert not native and "avx512_bf16" in evidence and "amx_bf16" in evidence
    for flag in ("avx512_bf16", "amx_bf16"):
        monkeypatch.setattr(precision, "cpu_flags", lambda flag=flag: frozenset({"avx2", flag}))
        assert native_bfloat16("cpu") == (True, f"CPU flags {flag}")
    # Without /proc/cpuinfo: torch's capability, where it reports the units.
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset())
    monkeypatch.setattr(precision, "torch_cpu_capability", lambda: "AMX_BF16")
    assert native_bfloat16("cpu")[0]


def test_this_machines_flags_are_read():
    flags = precision.cpu_flags()
    assert isinstance(flags, frozenset)
    assert precision.torch_cpu_capability() is None or precision.torch_cpu_capability()


def test_int8_on_a_gpu_is_an_error_naming_the_option():
    encoder = LayerNormLstm(4, 3, 5)
    with pytest.raises(ConfigurationError, match=r"--dtype int8 .* CPU only"):
        prepare_encoder(encoder, "int8", "cuda:0", "--dtype")


def test_bfloat16_without_units_leaves_the_encoder_as_it_is_with_one_line(
    cpu_without_bfloat16, caplog
):
    encoder = LayerNormLstm(4, 3, 5)
    weight = encoder.forward_layers[0].state_linearity.weight
    with caplog.at_level(logging.INFO, logger="elmoc_allennlp.common.precision"):
        assert prepare_encoder(encoder, "bfloat16", "cpu") == "float32"
    assert len(caplog.records) == 1
    assert "runs in float32" in caplog.records[0].getMessage()
    assert "avx512_bf16" in caplog.records[0].getMessage()
    assert encoder.inference_input_dtype is None
    assert encoder.forward_layers[0].state_linearity.weight is weight


def test_an_encoder_without_an_inference_path_is_refused():
    with pytest.raises(ConfigurationError, match="runs in float32 only"):
        prepare_encoder(torch.nn.LSTM(3, 4), "int8", "cpu")


def test_cpu_flags_are_empty_where_cpuinfo_cannot_be_read(monkeypatch):
    def unreadable(*args, **kwargs):
        raise PermissionError("/proc/cpuinfo")

    monkeypatch.setattr("builtins.open", unreadable)
    assert precision.cpu_flags.__wrapped__() == frozenset()


def test_native_bfloat16_on_a_gpu_and_on_other_devices(monkeypatch):
    for supported in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: supported)
        native, evidence = native_bfloat16("cuda")
        assert native is supported and f"is {supported}" in evidence
    assert native_bfloat16("meta") == (False, "no bfloat16 detection for device type 'meta'")


def test_an_encoder_is_prepared_once():
    encoder = LayerNormLstm(4, 3, 5)
    assert prepare_encoder(encoder, "int8", "cpu") == "int8"
    with pytest.raises(ConfigurationError, match="already prepared for int8"):
        prepare_encoder(encoder, "int8", "cpu")
