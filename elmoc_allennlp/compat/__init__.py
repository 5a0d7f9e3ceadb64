"""
The changes to allennlp 2.10.1 that the plugin's components need and that cannot be scoped to them
(`docs/compat.md`). Each module has `REPLACES` (for the log line), `TARGETS` (dotted names of what
it replaces) and an idempotent `install() -> bool` (`False`: not needed here). `install_shims()`
installs these and the guards of `elmoc_allennlp.hardening` when `elmoc_allennlp` is imported.
`tools/torchvision_placeholder` (a `.pth` file) stands in for a missing torchvision, which allennlp
imports before any plugin; it goes once allennlp imports torchvision lazily.
"""
import importlib
import logging
from typing import List, Optional

logger = logging.getLogger(__name__)

# Modules of this package, in the order they are installed.
SHIMS = ("reduce_on_plateau", "elmoc_as_elmo", "carried_files")

_installed: Optional[List[str]] = None


def install_shims() -> List[str]:
    """Installs the guards of `hardening.GUARDS` and the shims of `SHIMS` (once per process);
    returns the dotted module names of those applied."""
    global _installed
    if _installed is not None:
        return list(_installed)
    from elmoc_allennlp.hardening import GUARDS

    _installed = []
    descriptions = []
    # The guards first: `carried_files` adds its members to what the atomic archiving writes.
    for module in [f"elmoc_allennlp.hardening.{name}" for name in GUARDS] + [f"{__name__}.{name}" for name in SHIMS]:
        shim = importlib.import_module(module)
        if shim.install():
            _installed.append(module)
            descriptions.append(f"{module.rsplit('.', 1)[1]} ({shim.REPLACES})")
    logger.info(
        "elmoc_allennlp: %d patches of allennlp 2.10.1 installed, of which %d act on the plugin's "
        "own components only (listed at DEBUG)",
        len(descriptions),
        len(GUARDS),
    )
    logger.debug("elmoc_allennlp replaces in this process: %s", "; ".join(descriptions))
    return list(_installed)
