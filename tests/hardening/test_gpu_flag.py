"""Every entry point of the plugin refuses a GPU this machine lacks the same way: one line, before any work."""

import pytest
import torch

from allennlp.common.checks import ConfigurationError

import elmoc_allennlp  # noqa: F401  (installs the shims)
from elmoc_allennlp.commands.elmoc_embed import embed_file
from elmoc_allennlp.downstream.embedder import ElmocEmbedder

MISSING = torch.cuda.device_count()  # the first index this machine does not have


def _one_line(error) -> str:
    message = str(error.value)
    assert (
        "\n" not in message and f"{MISSING}: this machine has {MISSING} CUDA device(s)" in message
    )
    return message


def test_elmoc_embedder(elmoc_archive):
    with pytest.raises(ConfigurationError) as error:
        ElmocEmbedder(str(elmoc_archive), cuda_device=MISSING)
    assert _one_line(error).startswith("cuda_device")


def test_elmoc_embed(elmoc_archive, tmp_path):
    sentences = tmp_path / "in.txt"
    sentences.write_text("the cat\n")
    with pytest.raises(ConfigurationError) as error:
        embed_file(
            str(elmoc_archive), str(sentences), str(tmp_path / "out.hdf5"), cuda_device=MISSING
        )
    assert _one_line(error).startswith("--cuda-device")
    assert not (tmp_path / "out.hdf5").exists()
