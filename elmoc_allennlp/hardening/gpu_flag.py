"""Loading a plugin's archive onto a GPU this machine lacks fails in one line, before the model is
built (allennlp 2.10.1 fails in `model.cuda()` with torch's traceback)."""
from elmoc_allennlp.common.checks import check_cuda_device
from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import plugin_config

REPLACES = "loading a plugin's archive onto a missing GPU fails in one line"


def _load_model(original, config, weights_path, serialization_dir, cuda_device):
    if plugin_config(config):
        check_cuda_device(cuda_device, "--cuda-device (cuda_device)")
    return original(config, weights_path, serialization_dir, cuda_device)


TARGETS, install = installer({"allennlp.models.archival._load_model": _load_model})
