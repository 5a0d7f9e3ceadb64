"""The torch-release differences (`common/torch_versions.py`), on whichever torch runs the suite:
torch 1.12 in the published allennlp environment, torch 2.x in the modern one."""

import collections
import io
import pickle

import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common import torch_versions


class _Payload:
    """Unpickling this runs `open(path, "w")`: creates a file, as any pickled call could."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _saved(value, zipfile: bool) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(value, buffer, _use_new_zipfile_serialization=zipfile)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_load_tensors_round_trips_a_training_state(zipfile):
    linear = torch.nn.Linear(3, 2)
    state = {
        "model": linear.state_dict(),
        "parameter": torch.nn.Parameter(torch.randn(4)),
        "ints": torch.arange(5),
        "half": torch.randn(2, 2).half(),
        "epoch": 3,
        "history": [0.5, {"loss": 1.25}],
        "ordered": collections.OrderedDict(a=torch.ones(1)),
    }
    loaded = torch_versions.load_tensors(_saved(state, zipfile))
    assert set(loaded) == set(state)
    for name, tensor in state["model"].items():
        assert torch.equal(loaded["model"][name], tensor)
    assert isinstance(loaded["parameter"], torch.nn.Parameter)
    assert torch.equal(loaded["parameter"], state["parameter"])
    assert loaded["ints"].dtype == torch.int64 and torch.equal(loaded["ints"], state["ints"])
    assert loaded["half"].dtype == torch.float16 and torch.equal(loaded["half"], state["half"])
    assert loaded["epoch"] == 3 and loaded["history"] == [0.5, {"loss": 1.25}]
    assert isinstance(loaded["ordered"], collections.OrderedDict)


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_load_tensors_refuses_a_pickle_payload(tmp_path, zipfile):
    marker = tmp_path / "payload-ran"
    buffer = _saved({"weight": torch.ones(2), "extra": _Payload(marker)}, zipfile)
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):
        torch_versions.load_tensors(buffer)
    assert not marker.exists(), "the payload ran"
    # the same file loads with plain pickle semantics, so it is the loader that refused it
    torch.load(
        _saved({"extra": _Payload(marker)}, zipfile),
        **({"weights_only": False} if torch_versions.TORCH_VERSION >= (1, 13) else {}),
    )
    assert marker.exists()


def test_autocast_enabled_follows_the_cpu_autocast_context():
    assert not torch_versions.autocast_enabled("cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch_versions.autocast_enabled("cpu")
        assert not torch_versions.autocast_enabled("cuda")
        with torch.autocast("cpu", enabled=False):
            assert not torch_versions.autocast_enabled("cpu")
    assert not torch_versions.autocast_enabled("cpu")


def test_functional_call_uses_the_given_parameters():
    linear = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    weight, bias = torch.randn(2, 3), torch.randn(2)
    out = torch_versions.functional_call(linear, {"weight": weight, "bias": bias}, (x,))
    torch.testing.assert_close(out, x @ weight.t() + bias)
    torch.testing.assert_close(linear(x), x @ linear.weight.t() + linear.bias)  # module unchanged


def test_require_torch_names_the_version_needed():
    torch_versions.require_torch(torch_versions.TORCH_VERSION, "this feature")  # no error
    with pytest.raises(ConfigurationError) as error:
        torch_versions.require_torch((99, 1), "Time travel")
    assert "torch >= 99.1" in str(error.value) and torch.__version__ in str(error.value)


def test_meta_device_builds_without_storage_or_is_refused_naming_torch_2():
    if torch_versions.TORCH_VERSION >= (2, 0):
        with torch_versions.meta_device():
            linear = torch.nn.Linear(4096, 4096)
        assert linear.weight.is_meta and linear.weight.shape == (4096, 4096)
    else:
        with pytest.raises(ConfigurationError, match=r"torch >= 2\.0"):
            with torch_versions.meta_device():
                torch.nn.Linear(2, 2)


def test_load_tensors_reads_what_allennlp_training_writes(elmoc_archive):
    """Model states, best.th and training states (optimizer, scheduler, metric tracker) of a real run."""
    paths = sorted(elmoc_archive.parent.glob("*.th"))
    assert {"best.th"} < {path.name for path in paths}
    assert any(path.name.startswith("training_state") for path in paths)
    for path in paths:
        restricted, trusted = torch_versions.load_tensors(path), torch_versions.load_trusted(path)
        assert restricted.keys() == trusted.keys(), path.name
        if path.name.startswith("training_state"):
            assert restricted["optimizer"]["param_groups"] == trusted["optimizer"]["param_groups"]
        else:
            for name, tensor in trusted.items():
                assert torch.equal(restricted[name], tensor), (path.name, name)
