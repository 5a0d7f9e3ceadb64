"""
Changes to allennlp 2.10.1 that must hold in every process that imports the plugin. Each is a
module here whose docstring says the problem, the workaround and when it can go, with `REPLACES`
(a phrase for the log line), `TARGETS` (the dotted names of the allennlp objects it replaces; a
test checks that importing the plugin replaces exactly these) and an idempotent `install() ->
bool` (`False`: this environment does not need it). `install_shims()`, run when `elmoc_allennlp`
is imported, installs those in `SHIMS` and logs one short line (the list at DEBUG).

One stand-in cannot wait for the plugin: allennlp imports torchvision before any plugin, so
`tools/torchvision_placeholder` (a `.pth` file run at start-up) registers a placeholder module
where no real torchvision is importable. To drop it: once allennlp imports torchvision lazily.
"""
import importlib
import logging
from typing import List, Optional

logger = logging.getLogger(__name__)

# Modules of this package, in the order they are installed.
SHIMS = (
    "safe_archive_extraction",
    "safe_config_types",
    "weights_only_loading",
    "predict_output_file",
    "predict_input_encoding",
    "reduce_on_plateau",
    "atomic_train_files",
    "carried_files",
    "gpu_flag",
    "elmoc_as_elmo",
    "quiet_log_files",
    "serialization_lock",
    "evaluate_summary",
)

_installed: Optional[List[str]] = None


def install_shims() -> List[str]:
    """Installs every shim in `SHIMS` (once per process); returns the names of those applied."""
    global _installed
    if _installed is not None:
        return list(_installed)
    _installed = []
    descriptions = []
    for name in SHIMS:
        shim = importlib.import_module(f"{__name__}.{name}")
        if shim.install():
            _installed.append(name)
            descriptions.append(f"{name} ({shim.REPLACES})")
    if descriptions:
        logger.info(
            "elmoc_allennlp: %d patches of allennlp 2.10.1 installed (elmoc_allennlp/compat/; listed at DEBUG)",
            len(descriptions),
        )
        logger.debug("elmoc_allennlp replaces in this process: %s", "; ".join(descriptions))
    return list(_installed)
