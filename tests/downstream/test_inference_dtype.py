"""
`dtype` of a trained biLM downstream (issue #51): `ElmocEmbedder`, `elmoc_token_embedder`
(`ElmocElmo`), the layer cache and `elmoc-embed`: float32 as before, int8 quantized and close,
bfloat16 close where the CPU has it and float32 (one line) where it does not.
"""

import logging

import numpy
import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive
from allennlp.modules.token_embedders import TokenEmbedder

from elmoc_allennlp.commands.elmoc_embed import embed_file
from elmoc_allennlp.common import precision
from elmoc_allennlp.common.precision import is_quantized
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.downstream.elmoc import ElmocBiLm, ElmocElmo
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
from elmoc_allennlp.downstream.input_kinds import add_boundaries
from tests.downstream.conftest import SENTENCES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# The tiny biLM's bound (seen: int8 min 0.9998, bfloat16 min 0.9999 over these tokens).
COSINE_BOUND = 0.99


@pytest.fixture(scope="module")
def float32_embedder(elmoc_archive):
    return ElmocEmbedder(str(elmoc_archive))


@pytest.fixture(scope="module")
def int8_embedder(elmoc_archive):
    return ElmocEmbedder(str(elmoc_archive), dtype="int8")


def min_cosine(ours, reference) -> float:
    low = 1.0
    for a, b in zip(ours, reference):
        a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        if len(a):
            cos = (a * b).sum(-1) / numpy.linalg.norm(a, axis=-1) / numpy.linalg.norm(b, axis=-1)
            low = min(low, float(cos.min()))
    return low


def test_float32_is_the_trained_models_own_computation(elmoc_archive, float32_embedder):
    """The fast path, untouched: equal to the archive's model run directly on the same ids."""
    bilm = float32_embedder.bilm
    assert float32_embedder.running_dtype == "float32"
    assert bilm.bilm.contextualizer.inference_input_dtype is None
    model = load_archive(str(elmoc_archive)).model.eval()
    ids = indexed_batch(float32_embedder._indexer, SENTENCES)
    boundaries = bilm.boundary_ids
    with torch.no_grad():
        tokens = bilm.input_kind.tensors(*add_boundaries(ids, boundaries))
        expected, _ = model.contextual_layers({bilm.archive.input_key: tokens})
        got = torch.stack(bilm(ids)["activations"])
    assert torch.equal(got, expected)
    explicit = ElmocEmbedder(str(elmoc_archive), dtype="float32")
    for a, b in zip(explicit.embed_batch(SENTENCES), float32_embedder.embed_batch(SENTENCES)):
        assert numpy.array_equal(a, b)


def test_a_frozen_bilm_runs_at_its_dtype_under_the_trainers_autocast(float32_embedder):
    """Mixed-precision downstream training (`trainer.precision`) leaves a frozen biLM at its
    `dtype` (what its layer cache holds); one trained with the model runs in the autocast."""
    bilm = float32_embedder.bilm
    ids = indexed_batch(float32_embedder._indexer, SENTENCES)
    with torch.no_grad():
        expected = torch.stack(bilm(ids)["activations"])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            frozen = torch.stack(bilm(ids)["activations"])
            bilm.requires_grad = True
            try:
                trained = torch.stack(bilm(ids)["activations"])
            finally:
                bilm.requires_grad = False
    assert torch.equal(frozen, expected)
    assert trained.dtype == torch.float32 and not torch.equal(trained, expected)
    torch.testing.assert_close(trained, expected, atol=0.1, rtol=0.05)


def test_int8_quantizes_the_big_maps_and_stays_close(float32_embedder, int8_embedder):
    assert int8_embedder.running_dtype == "int8"
    encoder = int8_embedder.bilm.bilm.contextualizer
    for layer in [*encoder.forward_layers, *encoder.backward_layers]:
        for name in ("input_linearity", "state_linearity", "state_projection"):
            assert is_quantized(getattr(layer, name)), name
    assert is_quantized(encoder.input_projection)
    ours = int8_embedder.embed_batch(SENTENCES)
    reference = float32_embedder.embed_batch(SENTENCES)
    assert all(array.dtype == numpy.float32 for array in ours)
    assert [a.shape for a in ours] == [a.shape for a in reference]
    assert not all(numpy.array_equal(a, b) for a, b in zip(ours, reference))
    assert min_cosine(ours, reference) > COSINE_BOUND


def test_bfloat16_without_units_is_float32_with_one_line(
    elmoc_archive, float32_embedder, monkeypatch, caplog
):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(precision, "torch_cpu_capability", lambda: "AVX2")
    with caplog.at_level(logging.WARNING):
        embedder = ElmocEmbedder(str(elmoc_archive), dtype="bfloat16")
        got = embedder.embed_batch(SENTENCES)
    lines = [record for record in caplog.records if "bfloat16" in record.getMessage()]
    assert len(lines) == 1 and "runs in float32" in lines[0].getMessage()
    assert embedder.running_dtype == "float32"
    for a, b in zip(got, float32_embedder.embed_batch(SENTENCES)):
        assert numpy.array_equal(a, b)


def test_bfloat16_with_units_runs_the_maps_in_bfloat16_close_to_float32(
    elmoc_archive, float32_embedder, monkeypatch
):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    embedder = ElmocEmbedder(str(elmoc_archive), dtype="bfloat16")
    assert embedder.running_dtype == "bfloat16"
    encoder = embedder.bilm.bilm.contextualizer
    assert encoder.inference_input_dtype == torch.bfloat16
    assert encoder.forward_layers[1].state_linearity.weight.dtype == torch.bfloat16
    ours = embedder.embed_batch(SENTENCES)
    assert all(array.dtype == numpy.float32 for array in ours)
    assert min_cosine(ours, float32_embedder.embed_batch(SENTENCES)) > COSINE_BOUND


def test_options_are_checked_before_loading(elmoc_archive):
    with pytest.raises(ConfigurationError, match=r"'bfloat61' \(did you mean 'bfloat16'\?\)"):
        ElmocEmbedder(str(elmoc_archive), dtype="bfloat61")
    with pytest.raises(ConfigurationError, match=r"dtype int8 .* CPU only"):
        precision.check_device("int8", "cuda:0", "dtype")
    with pytest.raises(ConfigurationError, match="dtype int8 runs a frozen biLM"):
        ElmocBiLm(str(elmoc_archive), requires_grad=True, dtype="int8")


def test_the_token_embedder_takes_dtype_from_its_config(elmoc_archive, float32_embedder):
    params = Params(
        {
            "type": "elmoc_token_embedder",
            "archive_file": str(elmoc_archive),
            "dropout": 0.0,
            "dtype": "int8",
        }
    )
    embedder = TokenEmbedder.from_params(params).eval()
    ids = indexed_batch(float32_embedder._indexer, SENTENCES)
    with torch.no_grad():
        embedder(ids)
    bilm = embedder.elmo.bilm
    assert bilm.dtype == "int8" and is_quantized(bilm.bilm.contextualizer.input_projection)
    with pytest.raises(ConfigurationError, match=r"'in8' \(did you mean 'int8'\?\)"):
        TokenEmbedder.from_params(
            Params(
                {"type": "elmoc_token_embedder", "archive_file": str(elmoc_archive), "dtype": "in8"}
            )
        )


def test_a_cache_filled_at_one_precision_is_not_read_at_another(elmoc_archive, tmp_path):
    cache = str(tmp_path / "cache")
    elmos = {
        dtype: ElmocElmo(str(elmoc_archive), 1, dropout=0.0, cache_directory=cache, dtype=dtype)
        for dtype in ("float32", "int8")
    }
    ids = indexed_batch(elmos["float32"].bilm.indexer, SENTENCES)
    layers = {}
    for dtype, elmo in elmos.items():
        with torch.no_grad():
            layers[dtype] = torch.stack(elmo.bilm(ids)["activations"])
        store = elmo.bilm.layer_cache
        assert (store.hits, store.misses) == (0, len(SENTENCES))  # nothing read of the other's
    paths = {dtype: elmo.bilm.layer_cache.path for dtype, elmo in elmos.items()}
    assert paths["float32"] != paths["int8"] and paths["int8"].name.endswith("-int8.lmdb")
    # A float32 biLM's cache is named (and recorded) as before precisions: still read.
    assert paths["float32"].name.endswith("-float32.lmdb") and "int8" not in paths["float32"].name
    assert not torch.equal(layers["float32"], layers["int8"])
    # Each reads its own.
    for dtype, elmo in elmos.items():
        with torch.no_grad():
            again = torch.stack(elmo.bilm(ids)["activations"])
        assert torch.equal(again, layers[dtype]) and elmo.bilm.layer_cache.hits == len(SENTENCES)


def test_elmoc_embed_dtype(elmoc_archive, float32_embedder, tmp_path):
    import h5py

    lines = tmp_path / "lines.txt"
    lines.write_text("the cat sat\na dog\n", encoding="utf-8")
    with pytest.raises(
        ConfigurationError, match=r"--dtype .* 'flaot32' \(did you mean 'float32'\?\)"
    ):
        embed_file(str(elmoc_archive), str(lines), str(tmp_path / "never.hdf5"), dtype="flaot32")
    assert not (tmp_path / "never.hdf5").exists()
    output = embed_file(str(elmoc_archive), str(lines), str(tmp_path / "int8.hdf5"), dtype="int8")
    with h5py.File(output, "r") as hdf5:
        assert hdf5.attrs["dtype"] == "int8"
        got = [hdf5[str(index)][()] for index in range(2)]
    reference = float32_embedder.embed_batch([["the", "cat", "sat"], ["a", "dog"]])
    assert got[0].dtype == numpy.float32 and min_cosine(got, reference) > COSINE_BOUND


def test_downstream_weights_load_across_precisions(elmoc_archive, float32_embedder):
    """
    A downstream model's state holds the biLM's float32 weights at any precision: an archive trained
    at float32 runs at int8 (`-o '{"...elmo.dtype": "int8"}'`) and one trained at int8 loads as it ran.
    """
    from elmoc_allennlp.downstream.layer_cache import bilm_fingerprint

    ids = indexed_batch(float32_embedder._indexer, SENTENCES)
    elmos = {
        dtype: ElmocElmo(str(elmoc_archive), 1, dropout=0.0, dtype=dtype).eval()
        for dtype in ("float32", "int8")
    }
    with torch.no_grad():
        ran = elmos["int8"](ids)["elmo_representations"][0]  # prepared at its first batch
    state = elmos["int8"].state_dict()
    assert state.keys() == elmos["float32"].state_dict().keys()
    assert bilm_fingerprint(elmos["int8"].bilm) == bilm_fingerprint(elmos["float32"].bilm)
    elmos["float32"].load_state_dict(state)  # strict
    with torch.no_grad():
        assert elmos["float32"](ids)["elmo_representations"][0].shape == ran.shape
    fresh = ElmocElmo(str(elmoc_archive), 1, dropout=0.0, dtype="int8").eval()
    fresh.load_state_dict(elmos["float32"].state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(ids)["elmo_representations"][0], ran)


def test_the_dtype_flag_reaches_embed_file(elmoc_archive, tmp_path, monkeypatch):
    import argparse

    from elmoc_allennlp.commands import elmoc_embed

    parser = argparse.ArgumentParser()
    elmoc_embed.ElmocEmbed().add_subparser(parser.add_subparsers())
    lines = tmp_path / "lines.txt"
    lines.write_text("a dog\n", encoding="utf-8")
    command = ["elmoc-embed", str(elmoc_archive), str(lines), str(tmp_path / "out.hdf5"), "--top"]
    seen = []
    monkeypatch.setattr(elmoc_embed, "embed_file", lambda *a, **options: seen.append(options))
    for flags, expected in (([], "float32"), (["--dtype", "int8"], "int8")):
        args = parser.parse_args(command + flags)
        args.func(args)
        assert seen[-1]["dtype"] == expected
