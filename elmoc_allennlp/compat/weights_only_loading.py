"""
allennlp 2.10.1 problem: `Model._load` (through `allennlp.nn.util.read_state_dict`, so every
`load_archive`), the stock `Checkpointer.load_checkpoint` (`--recover`) and the `pretrained`
initializer (a weights file or archive named in a config) call `torch.load` without
`weights_only`: they are safe only through torch's default, and a user who sets
`TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` (torch's opt-out for old checkpoints) lets a pickle payload
in a stranger's `weights.th` run.

`install()` replaces the three with versions that load through
`elmoc_allennlp.common.torch_versions.load_tensors` (tensors and plain containers only, whatever
the environment says). `read_state_dict` with `strip_prefix` / `ignore` first checks the file
that way, then lets allennlp's own function filter it. To drop it: once allennlp passes
`weights_only=True` itself, delete this module and its name in `SHIMS`.
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
    """Makes allennlp load weights and checkpoints as tensors only (idempotent)."""
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
        path = weights_file_path
        if tarfile.is_tarfile(weights_file_path):  # an archive: its checked weights.th
            path = read_archive(weights_file_path).member("weights.th")
        self.weights = load_tensors(str(path))
        self.parameter_name_overrides = parameter_name_overrides or {}

    read_state_dict._elmoc_weights_only = True  # type: ignore[attr-defined]
    util.read_state_dict = read_state_dict
    Checkpointer.load_checkpoint = load_checkpoint  # type: ignore[assignment]
    PretrainedModelInitializer.__init__ = __init__  # type: ignore[assignment]
    return True
