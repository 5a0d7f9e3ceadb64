"""Guards against bad input around allennlp 2.10.1 (docs/trust_and_safety.md): `GUARDS` act on the plugin's
own (`scope.py`); `OPT_IN`, and the guards for everything, only with the plugin line `elmoc_allennlp_hardening`.
"""

import contextlib
import importlib
from typing import Iterator, List

from elmoc_allennlp.hardening import scope

GUARDS = ("safe_archive_extraction", "atomic_train_files", "serialization_lock")
# They guard or polish what stock allennlp does for every model: installed by the switch only.
OPT_IN = (
    "safe_config_types",
    "weights_only_loading",
    "quiet_log_files",
    "evaluate_summary",
    "predict_files",
)


def harden_everywhere() -> List[str]:
    """Turns every guard on for everything in this process (the switch); returns the `OPT_IN` installed."""
    scope.set_everywhere(True)
    return [name for name in OPT_IN if importlib.import_module(f"{__name__}.{name}").install()]


@contextlib.contextmanager
def hardened_everywhere() -> Iterator[None]:
    """The switch within the block only (the opt-in guards stay installed, idle afterwards)."""
    before = scope.everywhere()
    harden_everywhere()
    try:
        yield
    finally:
        scope.set_everywhere(before)
