"""
Checks an installed (not editable, not source-tree) elmoc_allennlp: it imports from site-packages,
and allennlp loads its registered components through a `.allennlp_plugins` file, as the allennlp
command does, and not without one.

    .venv/bin/python tools/check_wheel.py        # after `pip install dist/elmoc_allennlp-*.whl`
"""

import os
import sys
import sysconfig
import tempfile
from pathlib import Path

EXPECTED = {
    "TokenEmbedder": ["elmoc_token_embedder", "elmoc_fasttext"],
    "LanguageModelOutputLayer": ["elmoc_continuous", "elmoc_sampled_softmax"],
}


def registered():
    from allennlp.common import Registrable

    bases = {base.__name__: base for base in Registrable._registry}
    return {
        base: sorted(set(names) & set(bases[base].list_available())) if base in bases else []
        for base, names in EXPECTED.items()
    }


def main() -> int:
    here = Path(tempfile.mkdtemp(prefix="elmoc-wheel-check-"))
    os.chdir(here)  # no source tree on the path: what imports is the installed package
    sys.path[:] = [
        p
        for p in sys.path
        if p not in ("", ".") and Path(p).resolve() != Path(__file__).resolve().parent
    ]
    from allennlp.common.plugins import import_plugins

    import_plugins()
    before = registered()
    assert "elmoc_allennlp" not in sys.modules, "imported without a plugins file"
    (here / ".allennlp_plugins").write_text("elmoc_allennlp\n")
    import_plugins()
    after = registered()
    import elmoc_allennlp

    location = Path(elmoc_allennlp.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    print(f"elmoc_allennlp from {location}")
    print(f"without .allennlp_plugins: {before}; with it: {after}")
    assert site in location.parents, f"not the installed package: {location}"
    assert after == {base: sorted(names) for base, names in EXPECTED.items()}, after
    assert all(not names for names in before.values()), before
    print("wheel check OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
