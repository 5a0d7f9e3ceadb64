"""docs/compat.md lists every allennlp object the plugin replaces, in the section of its kind: the shims
of `elmoc_allennlp.compat`, the guards of the plugin's own, and the opt-in ones of the switch."""

import importlib
import re
from pathlib import Path

import pytest

from elmoc_allennlp import compat, hardening

DOC = (Path(__file__).resolve().parents[2] / "docs" / "compat.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return DOC.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _shown(target: str) -> str:
    """How the doc names a target: its owner and attribute, a registered name after its registry."""
    registered = re.match(r".*\.(\w+)\['(\w+)'\]$", target)
    if registered:
        return f"{registered.group(1)}` `{registered.group(2)}"
    return ".".join(target.split(".")[-2:])


def test_every_replaced_object_is_listed_in_the_section_of_its_kind():
    sections = {
        "Process-wide, because the plugin's components need them": [
            f"compat.{name}" for name in compat.SHIMS
        ],
        "Guards of the plugin's own archives, configs and runs": [
            f"hardening.{name}" for name in hardening.GUARDS
        ],
        "Opt-in: the switch": [f"hardening.{name}" for name in hardening.OPT_IN],
    }
    for title, modules in sections.items():
        text = _section(title)
        for module in modules:
            assert f"{module.split('.')[1]}.py" in text, (title, module)
            for target in importlib.import_module(f"elmoc_allennlp.{module}").TARGETS:
                assert _shown(target) in text, (title, target)


@pytest.mark.parametrize("polish", ["evaluate_summary", "predict_files"])
def test_no_polish_is_installed_by_default(polish):
    """Interface polish of allennlp-wide behaviour is the switch's: importing the plugin installs it not."""
    assert polish in hardening.OPT_IN and polish not in hardening.GUARDS
    assert f"elmoc_allennlp.hardening.{polish}" not in compat.install_shims()
