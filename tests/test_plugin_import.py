"""
What importing the plugin does to allennlp, observed in a fresh interpreter: it registers its
components under names starting with `elmoc` (older names only as aliases), replaces exactly the
allennlp objects that the shims of `elmoc_allennlp.compat` declare, and says so in one log line.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Runs in a fresh interpreter: snapshot allennlp, import the plugin, report the differences.
PROBE = r"""
import importlib, inspect, json, logging, sys

records = []

class Collect(logging.Handler):
    def emit(self, record):
        records.append({"logger": record.name, "message": record.getMessage()})

logging.getLogger().addHandler(Collect())
logging.getLogger().setLevel(logging.INFO)

import allennlp.commands  # imports the rest of allennlp that the plugin touches
from allennlp.common import Registrable


def registry_key(base, name):
    return f"{base.__module__}.{base.__name__}[{name!r}]"


def snapshot():
    objects = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "allennlp" or module_name.startswith("allennlp.")):
            continue
        for attribute, value in list(vars(module).items()):
            if callable(value):
                objects[f"{module_name}.{attribute}"] = value
            if inspect.isclass(value) and value.__module__ == module_name:
                for member, member_value in list(vars(value).items()):
                    objects[f"{module_name}.{attribute}.{member}"] = member_value
    registry = {
        registry_key(base, name): entry
        for base, names in Registrable._registry.items()
        for name, entry in names.items()
    }
    return objects, registry


objects_before, registry_before = snapshot()
import elmoc_allennlp
from elmoc_allennlp import compat

objects_after, registry_after = snapshot()
replaced = sorted(
    name for name, value in objects_before.items()
    if name in objects_after and objects_after[name] is not value
)
replaced += sorted(
    name for name, entry in registry_before.items() if registry_after.get(name) != entry
)
# Members given to allennlp classes that had none of that name (e.g. an inherited classmethod).
replaced += sorted(
    name for name in objects_after
    if name not in objects_before and name.rsplit(".", 1)[0] in objects_before
)
replaced = sorted(replaced)
declared = sorted(
    target
    for shim in compat.install_shims()
    for target in importlib.import_module(f"elmoc_allennlp.compat.{shim}").TARGETS
)
registrations = {}
for base, names in Registrable._registry.items():
    for name, (subclass, constructor) in names.items():
        if subclass.__module__.startswith("elmoc_allennlp"):
            registrations.setdefault(f"{base.__module__}.{base.__name__}", []).append(
                [name, f"{subclass.__module__}.{subclass.__qualname__}"]
            )
print(json.dumps({
    "replaced": replaced,
    "declared": declared,
    "shims": list(compat.SHIMS),
    "installed": compat.install_shims(),
    "registrations": registrations,
    "log": records,
}))
"""


@pytest.fixture(scope="module")
def plugin_import():
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_plugin_replaces_exactly_what_its_shims_declare(plugin_import):
    assert plugin_import["installed"], "no shim was needed: update the README and this test"
    assert plugin_import["replaced"] == plugin_import["declared"]
    # Every replacement lives in elmoc_allennlp/compat/ and is listed in docs/compat.md.
    readme = (REPO_ROOT / "docs" / "compat.md").read_text()
    for shim in plugin_import["shims"]:
        assert (REPO_ROOT / "elmoc_allennlp" / "compat" / f"{shim}.py").is_file()
        assert f"`elmoc_allennlp/compat/{shim}.py`" in readme, shim


def test_one_log_line_names_the_shims_and_nothing_says_overwriting(plugin_import):
    lines = [r["message"] for r in plugin_import["log"] if r["logger"] == "elmoc_allennlp.compat"]
    assert len(lines) == 1, lines
    for shim in plugin_import["installed"]:
        assert shim in lines[0]
    assert not [r for r in plugin_import["log"] if "overwriting" in r["message"]]


def test_every_registration_starts_with_elmoc_and_older_names_are_aliases(plugin_import):
    replacements = set(plugin_import["declared"])
    checked = 0
    for registry, entries in plugin_import["registrations"].items():
        classes_with_elmoc_names = {cls for name, cls in entries if name.startswith("elmoc")}
        for name, cls in entries:
            checked += 1
            if name.startswith("elmoc") or f"{registry}[{name!r}]" in replacements:
                continue
            # An older name: only an alias of a component that has its elmoc name.
            assert cls in classes_with_elmoc_names, (registry, name, cls)
    assert checked >= 20
