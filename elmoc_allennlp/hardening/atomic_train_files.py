"""`allennlp train` of the plugin's runs writes `config.json` atomically (allennlp 2.10.1 writes it in place:
a kill leaves a truncated config); its `model.tar.gz` is written atomically by `compat/carried_files.py`."""
from elmoc_allennlp.common.atomic_files import atomic_path
from elmoc_allennlp.common.shims import installer
from elmoc_allennlp.hardening.scope import plugin_config

REPLACES = "`allennlp train` of the plugin's runs writes config.json atomically"


def _to_file(original, self, params_file: str, preference_orders=None) -> None:
    if not plugin_config(self):
        return original(self, params_file, preference_orders)
    with atomic_path(params_file) as temporary:
        original(self, temporary, preference_orders)


TARGETS, install = installer({"allennlp.common.params.Params.to_file": _to_file})
