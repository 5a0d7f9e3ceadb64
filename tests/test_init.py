"""
What importing the plugin does to allennlp, observed in a fresh interpreter: it registers its
components under names starting with `elmoc`, replaces exactly the allennlp objects that the shims
of `elmoc_allennlp.compat` and the guards of `elmoc_allennlp.hardening` declare (the opt-in ones
only with the switch), says so in one short log line, and offers its user-facing classes at the
short path `elmoc_allennlp`; its folders import downwards only.
"""

import ast
import json
import os
from pathlib import Path

import pytest

from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[1]

# Runs in a fresh interpreter: snapshot allennlp, import the plugin, report the differences.
PROBE = r"""
import importlib, inspect, json, logging, sys

records = []

class Collect(logging.Handler):
    def emit(self, record):
        records.append({"logger": record.name, "level": record.levelno, "message": record.getMessage()})

logging.getLogger().addHandler(Collect())
logging.getLogger().setLevel(logging.DEBUG)

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
from elmoc_allennlp import compat, hardening
if SWITCH:
    import elmoc_allennlp_hardening

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
installed = compat.install_shims() + (
    [f"elmoc_allennlp.hardening.{name}" for name in hardening.OPT_IN] if SWITCH else []
)
declared = sorted({
    target for shim in installed for target in importlib.import_module(shim).TARGETS
})
# Installing every shim again changes nothing (each `install` is idempotent).
for shim in installed:
    importlib.import_module(shim).install()
objects_again, registry_again = snapshot()
reinstalled = sorted(name for name, value in objects_after.items() if objects_again.get(name) is not value)
reinstalled += sorted(name for name, entry in registry_after.items() if registry_again.get(name) != entry)
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
    "installed": installed,
    "registrations": registrations,
    "reinstalled": reinstalled,
    "log": records,
}))
"""


def _probe(switch: bool) -> dict:
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = run_python(
        ["-c", f"SWITCH = {switch}\n" + PROBE], env=environment, cwd=REPO_ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def plugin_import():
    """
    What importing the plugin (without the switch) changes in allennlp.

    A fresh process (`tests/fresh_process.py`) imports allennlp, then the plugin, because what
    the import changes is seen only against an allennlp the plugin never touched.
    """
    return _probe(switch=False)


def test_the_plugin_replaces_exactly_what_its_shims_declare(plugin_import):
    """
    Importing the plugin replaces exactly the allennlp objects its shims declare, idempotently.

    Slow (~5 s in the module-scoped `plugin_import` setup, where it is the first fresh process of
    its test process: the forkserver of `tests/fresh_process.py` imports torch and transformers
    once): a fresh process imports allennlp, then the plugin, because the replacements show only
    against an allennlp never touched.
    """
    assert plugin_import["installed"], "no shim was needed: update the docs and this test"
    assert plugin_import["replaced"] == plugin_import["declared"]
    # Every shim is a module of elmoc_allennlp/compat/ or /hardening/, and installing it twice
    # replaces nothing more.
    for shim in plugin_import["installed"]:
        assert (REPO_ROOT / (shim.replace(".", "/") + ".py")).is_file()
    assert plugin_import["reinstalled"] == []
    # The opt-in guards are not installed without the switch.
    from elmoc_allennlp.hardening import OPT_IN

    assert not {f"elmoc_allennlp.hardening.{name}" for name in OPT_IN} & set(
        plugin_import["installed"]
    )


def test_the_switch_adds_exactly_the_opt_in_guards():
    """
    The switch installs the opt-in guards too, and replaces exactly what the guards declare.

    A fresh process imports allennlp, the plugin and the switch: the switch's replacements show
    only against an allennlp never touched.
    """
    switched = _probe(switch=True)
    from elmoc_allennlp.hardening import OPT_IN

    assert switched["replaced"] == switched["declared"]
    assert {f"elmoc_allennlp.hardening.{name}" for name in OPT_IN} <= set(switched["installed"])
    assert switched["reinstalled"] == []


def test_importing_logs_one_short_line_and_the_list_at_debug(plugin_import):
    plugin = [r for r in plugin_import["log"] if r["logger"].startswith("elmoc_allennlp")]
    shown = [r["message"] for r in plugin if r["level"] >= 20]  # INFO and above
    assert len(shown) == 1 and len(shown[0]) <= 200, shown
    assert str(len(plugin_import["installed"])) in shown[0]
    debug = [
        r["message"] for r in plugin if r["logger"] == "elmoc_allennlp.compat" and r["level"] == 10
    ]
    assert len(debug) == 1
    for shim in plugin_import["installed"]:
        assert shim.rsplit(".", 1)[1] in debug[0]
    assert not [r for r in plugin_import["log"] if "overwriting" in r["message"]]


def test_every_registration_starts_with_elmoc(plugin_import):
    replacements = set(plugin_import["declared"])
    checked = 0
    for registry, entries in plugin_import["registrations"].items():
        for name, cls in entries:
            checked += 1
            # Only a stock name that a shim declares it replaces may be taken.
            assert name.startswith("elmoc") or f"{registry}[{name!r}]" in replacements, (
                registry,
                name,
                cls,
            )
    assert checked >= 20


def test_the_classes_a_script_uses_import_from_the_package():
    import elmoc_allennlp
    from elmoc_allennlp import (
        BidirectionalLanguageModel,
        BilmArchive,
        ElmocBiLm,
        ElmocElmo,
        ElmocEmbedder,
        ElmocTokenEmbedder,
        FastTextVectors,
    )
    from elmoc_allennlp.downstream.archive import BilmArchive as archive_path
    from elmoc_allennlp.downstream.elmoc import ElmocBiLm as bilm_path, ElmocElmo as elmo_path
    from elmoc_allennlp.downstream.embedder import (
        ElmocEmbedder as embedder_path,
    )  # the README's older path
    from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder as token_embedder_path
    from elmoc_allennlp.models.bidirectional_language_model import (
        BidirectionalLanguageModel as model_path,
    )
    from elmoc_allennlp.fasttext.vectors import FastTextVectors as vectors_path

    assert (ElmocEmbedder, ElmocElmo, ElmocBiLm, ElmocTokenEmbedder) == (
        embedder_path,
        elmo_path,
        bilm_path,
        token_embedder_path,
    )
    assert (BilmArchive, BidirectionalLanguageModel, FastTextVectors) == (
        archive_path,
        model_path,
        vectors_path,
    )
    assert sorted(elmoc_allennlp.__all__) == sorted(
        [
            "BidirectionalLanguageModel",
            "BilmArchive",
            "ElmocBiLm",
            "ElmocElmo",
            "ElmocEmbedder",
            "ElmocTokenEmbedder",
            "FastTextVectors",
        ]
    )


def _folder_imports() -> dict:
    """folder of `elmoc_allennlp` -> the other folders its modules import (at any depth of the code)."""
    imports: dict = {}
    for path in (REPO_ROOT / "elmoc_allennlp").rglob("*.py"):
        parts = path.relative_to(REPO_ROOT / "elmoc_allennlp").parts
        if len(parts) < 2:
            continue  # the package's __init__ imports every folder
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            modules += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for module in modules:
                names = module.split(".")
                if names[0] == "elmoc_allennlp" and len(names) > 1 and names[1] != parts[0]:
                    imports.setdefault(parts[0], set()).add(names[1])
    return imports


def test_the_package_folders_import_downwards_only():
    imports = _folder_imports()
    assert imports.get("training") == {"common"}, imports.get("training")
    assert not imports.get("common"), imports.get("common")
    # No circle: the folders can be ordered so that each imports only earlier ones.
    remaining = dict(imports)
    while remaining:
        leaves = [folder for folder, used in remaining.items() if not used & set(remaining)]
        assert leaves, f"import circle among {sorted(remaining)}"
        for folder in leaves:
            del remaining[folder]


def test_include_package_does_not_turn_the_switch_on():
    """
    `--include-package elmoc_allennlp` imports every module of the package: none is the switch.

    A fresh process imports allennlp and every module of the plugin: whether the switch is on is
    only seen where nothing has turned it on before.
    """
    probe = (
        "import json\n"
        "from allennlp.common.registrable import Registrable\n"
        "before = Registrable.resolve_class_name\n"
        "from allennlp.common.util import import_module_and_submodules\n"
        "import_module_and_submodules('elmoc_allennlp')\n"
        "from elmoc_allennlp.hardening import scope\n"
        "print(json.dumps([scope.everywhere(), Registrable.resolve_class_name == before]))\n"
    )
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = run_python(["-c", probe], env=environment, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [False, True]
