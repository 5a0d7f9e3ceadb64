"""
Workarounds for allennlp 2.10.1 (its last release) that must hold in every process that imports
the plugin, not only in runs built from this project's components. Each is a module here whose
docstring says which allennlp problem it works around and how to drop it, with

- `REPLACES`: a short phrase saying what it changes (for the log line);
- `TARGETS`: the dotted names of the allennlp objects it replaces (`module.function`,
  `module.Class.method`, or `module.RegistrableClass['registered name']`); a test checks that
  importing the plugin replaces exactly these;
- `install() -> bool`: applies the workaround (idempotent); `False` if this environment does not
  need it (nothing is replaced then).

`install_shims()`, called when `elmoc_allennlp` is imported (`--include-package elmoc_allennlp`,
`.allennlp_plugins`, or `import elmoc_allennlp`), installs those listed in `SHIMS` and logs one
line naming the ones it applied. Adding a shim is adding its module name to `SHIMS`.
"""
import importlib
import logging
from typing import List

logger = logging.getLogger(__name__)

# Modules of this package, in the order they are installed.
SHIMS = (
    "safe_archive_extraction",
    "safe_config_types",
    "weights_only_loading",
    "predict_output_file",
    "reduce_on_plateau",
    "atomic_train_files",
    "elmoc_as_elmo",
    "quiet_log_files",
)

_installed: List[str] = []
_done = False


def install_shims() -> List[str]:
    """
    Installs every shim in `SHIMS` (once per process) and returns the names of those applied.
    """
    global _done
    if _done:
        return list(_installed)
    _done = True
    descriptions = []
    for name in SHIMS:
        shim = importlib.import_module(f"{__name__}.{name}")
        if shim.install():
            _installed.append(name)
            descriptions.append(f"{name} ({shim.REPLACES})")
    if descriptions:
        logger.info(
            "elmoc_allennlp replaces parts of allennlp 2.10.1 in this process "
            "(elmoc_allennlp/compat/): %s",
            "; ".join(descriptions),
        )
    return list(_installed)
