"""
Guards against bad input around allennlp 2.10.1, in two scopes (`docs/trust_and_safety.md`):

- `GUARDS`, installed when `elmoc_allennlp` is imported, act only on what is the plugin's own:
  an archive, config, run or model that uses an `elmoc_*` component (`scope.py`). Everything
  else goes to allennlp's functions untouched, so stock models behave exactly as without the
  plugin.
- `OPT_IN`, and the guards above for every archive, config, run and model, only when the user
  turns them on: the plugin line `elmoc_allennlp_hardening` (in `.allennlp_plugins`
  or `--include-package`), or `import elmoc_allennlp_hardening`.

Each module is a shim like those of `elmoc_allennlp.compat` (`REPLACES`, `TARGETS`, `install()`,
through `common.shims.install_shim`); its docstring says the problem, the workaround and when it can go.
"""
import contextlib
from typing import Iterator, List

# Installed with the plugin; each acts on the plugin's own archives, configs, runs and models.
GUARDS = (
    "safe_archive_extraction",
    "predict_output_file",
    "predict_input_encoding",
    "atomic_train_files",
    "gpu_flag",
    "serialization_lock",
    "evaluate_summary",
)
# Installed only by the switch (`elmoc_allennlp_hardening`): they guard what stock allennlp does for every model.
OPT_IN = ("safe_config_types", "weights_only_loading", "quiet_log_files")


def harden_everywhere() -> List[str]:
    """Turns every guard on for every archive, config, run and model of this process (the
    switch; `elmoc_allennlp_hardening.py` calls it). Returns the modules of `OPT_IN` it installed."""
    import importlib

    from elmoc_allennlp.hardening import scope

    scope.set_everywhere(True)
    return [name for name in OPT_IN if importlib.import_module(f"{__name__}.{name}").install()]


@contextlib.contextmanager
def hardened_everywhere() -> Iterator[None]:
    """Every guard for everything within the block only (the opt-in ones stay installed, idle
    again afterwards): for a program, or a test, that wants the switch for a while."""
    from elmoc_allennlp.hardening import scope

    before = scope.everywhere()
    harden_everywhere()
    try:
        yield
    finally:
        scope.set_everywhere(before)
