"""Opt-in: `read_state_dict`, `Checkpointer.load_checkpoint` and the `pretrained` initializer load
tensors only (allennlp 2.10.1 calls `torch.load` without `weights_only`)."""

import collections
import os
import tarfile

from allennlp.nn.util import device_mapping
from allennlp.training.checkpointer import TrainerCheckpoint

from elmoc_allennlp.common.archives import read_archive
from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.common.torch_versions import load_tensors
from elmoc_allennlp.hardening.scope import everywhere

REPLACES = "weights and checkpoints are loaded with weights_only=True, whatever the environment"


def _read_state_dict(original, path, strip_prefix=None, ignore=None, strict=True, cuda_device=-1):
    if not everywhere():
        return original(path, strip_prefix, ignore, strict, cuda_device)
    state = load_tensors(os.fspath(path), map_location=device_mapping(cuda_device))
    if strip_prefix is None and ignore is None:
        return collections.OrderedDict(state)
    return original(path, strip_prefix, ignore, strict, cuda_device)


def _load_checkpoint(original, self):
    latest = self.find_latest_checkpoint() if everywhere() else None
    if latest is None:
        return original(self)
    return TrainerCheckpoint(*(load_tensors(path) for path in latest))


def _init(original, self, weights_file_path: str, parameter_name_overrides=None) -> None:
    if not everywhere():
        return original(self, weights_file_path, parameter_name_overrides)
    if tarfile.is_tarfile(weights_file_path):  # an archive: its checked weights.th
        with read_archive(weights_file_path) as extracted:
            self.weights = load_tensors(str(extracted.member("weights.th")))
    else:
        self.weights = load_tensors(weights_file_path)
    self.parameter_name_overrides = parameter_name_overrides or {}


TARGETS, install = installer(
    {
        "allennlp.nn.util.read_state_dict": _read_state_dict,
        "allennlp.training.checkpointer.Checkpointer.load_checkpoint": _load_checkpoint,
        "allennlp.nn.initializers.PretrainedModelInitializer.__init__": _init,
    }
)
