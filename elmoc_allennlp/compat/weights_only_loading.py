"""
allennlp loads weights and checkpoints as tensors only.

**Problem (allennlp 2.10.1).** `read_state_dict` (every `load_archive`),
`Checkpointer.load_checkpoint` and the `pretrained` initializer call `torch.load` without `weights_only`: with
`TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` (or torch < 1.13) a stranger's `weights.th` can run code.

**Workaround.** `install()` replaces the three with versions that load through
`common.torch_versions.load_tensors`.

**To drop it**: when allennlp passes `weights_only=True` itself, remove this module and its entry
in `elmoc_allennlp.compat.SHIMS`.
"""
import collections
import os
import tarfile

from elmoc_allennlp.common.archives import read_archive
from elmoc_allennlp.common.torch_versions import load_tensors

REPLACES = "weights and checkpoints are loaded with weights_only=True, whatever the environment"
TARGETS = (
    "allennlp.nn.util.read_state_dict",
    "allennlp.training.checkpointer.Checkpointer.load_checkpoint",
    "allennlp.nn.initializers.PretrainedModelInitializer.__init__",
)


def install() -> bool:
    from allennlp.nn import util
    from allennlp.nn.initializers import PretrainedModelInitializer
    from allennlp.training.checkpointer import Checkpointer, TrainerCheckpoint

    original = util.read_state_dict
    if getattr(original, "_elmoc_weights_only", False):
        return True

    def read_state_dict(path, strip_prefix=None, ignore=None, strict=True, cuda_device=-1):
        state = load_tensors(os.fspath(path), map_location=util.device_mapping(cuda_device))
        if strip_prefix is None and ignore is None:
            return collections.OrderedDict(state)
        return original(path, strip_prefix, ignore, strict, cuda_device)

    def load_checkpoint(self):
        latest = self.find_latest_checkpoint()
        if latest is None:
            return None
        return TrainerCheckpoint(*(load_tensors(path) for path in latest))

    def __init__(self, weights_file_path: str, parameter_name_overrides=None) -> None:
        if tarfile.is_tarfile(weights_file_path):  # an archive: its checked weights.th
            with read_archive(weights_file_path) as extracted:
                self.weights = load_tensors(str(extracted.member("weights.th")))
        else:
            self.weights = load_tensors(weights_file_path)
        self.parameter_name_overrides = parameter_name_overrides or {}

    read_state_dict._elmoc_weights_only = True  # type: ignore[attr-defined]
    util.read_state_dict = read_state_dict
    Checkpointer.load_checkpoint = load_checkpoint  # type: ignore[assignment]
    PretrainedModelInitializer.__init__ = __init__  # type: ignore[assignment]
    return True
