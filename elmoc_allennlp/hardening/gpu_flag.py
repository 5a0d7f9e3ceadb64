"""
Loading an archive onto a GPU this machine lacks fails in one line.

**Problem (allennlp 2.10.1).** `load_archive(..., cuda_device=0)` (`allennlp evaluate` / `predict
--cuda-device 0`) on a machine without that GPU builds the model and fails in `model.cuda()` with
torch's "Found no NVIDIA driver" traceback.

**Workaround.** `install()` wraps `allennlp.models.archival._load_model`, which `load_archive`
looks up when it runs, to check the device first with `common.checks.check_cuda_device`, the
check of every entry point of the plugin (`elmoc-embed`, `ElmocEmbedder`), for a config of the
plugin (`scope.plugin_config`).

**To drop it**: when allennlp checks the device before building the model, remove this module and
its entry in `elmoc_allennlp.hardening.GUARDS`.
"""
import functools

REPLACES = "loading a plugin's archive onto a missing GPU fails in one line"
TARGETS = ("allennlp.models.archival._load_model",)


def _checking_device(original):
    from elmoc_allennlp.common.checks import check_cuda_device
    from elmoc_allennlp.hardening.scope import plugin_config

    @functools.wraps(original)
    def _load_model(config, weights_path, serialization_dir, cuda_device):
        if plugin_config(config):
            check_cuda_device(cuda_device, "--cuda-device (cuda_device)")
        return original(config, weights_path, serialization_dir, cuda_device)

    return _load_model


def install() -> bool:
    import allennlp.models.archival as archival

    from elmoc_allennlp.compat import install_shim

    install_shim(archival, "_load_model", _checking_device)
    return True
