"""
The switch of `elmoc_allennlp.hardening`: importing this module (the plugin line
`elmoc_allennlp_hardening` in `.allennlp_plugins`, `--include-package elmoc_allennlp_hardening`,
or an `import`) applies every guard to every archive, config, run and model of the process, stock
ones included. What that changes for stock models: `docs/trust_and_safety.md`. It is a module of
its own, outside `elmoc_allennlp`, because `--include-package elmoc_allennlp` imports every module
of that package.
"""

import logging

import elmoc_allennlp  # noqa: F401  (the plugin and its guards, installed first)
from elmoc_allennlp.hardening import OPT_IN, harden_everywhere

harden_everywhere()
logging.getLogger(__name__).info(
    "elmoc_allennlp_hardening: every archive, config and run is guarded (%d more patches)",
    len(OPT_IN),
)
