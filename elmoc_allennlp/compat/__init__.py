"""The changes to allennlp 2.10.1 that cannot be scoped to the plugin's components (docs/compat.md). Each module
has `REPLACES` (for the log), `TARGETS` and an idempotent `install() -> bool` (`False`: not needed here).
"""

import functools
import importlib
import logging
from typing import List, Tuple

logger = logging.getLogger(__name__)

# Modules of this package, in the order they are installed.
SHIMS = ("reduce_on_plateau", "elmoc_as_elmo", "carried_files")


def install_shims() -> List[str]:
    """Installs the guards of `hardening.GUARDS` and the shims of `SHIMS` (once per process);
    returns the dotted module names of those applied."""
    return list(_install())


@functools.lru_cache(maxsize=None)
def _install() -> Tuple[str, ...]:
    from elmoc_allennlp.hardening import GUARDS

    installed, descriptions = [], []
    for module in [f"elmoc_allennlp.hardening.{name}" for name in GUARDS] + [
        f"{__name__}.{name}" for name in SHIMS
    ]:
        shim = importlib.import_module(module)
        if shim.install():
            installed.append(module)
            descriptions.append(f"{module.rsplit('.', 1)[1]} ({shim.REPLACES})")
    logger.info(
        "elmoc_allennlp: %d patches of allennlp 2.10.1 installed, of which %d act on the plugin's "
        "own components only (listed at DEBUG)",
        len(descriptions),
        len(GUARDS),
    )
    logger.debug("elmoc_allennlp replaces in this process: %s", "; ".join(descriptions))
    return tuple(installed)
