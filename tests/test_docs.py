"""
The docs are code: every ```bash / ```sh / ```shell / ```python block of README.md, docs/*.md,
training_configs/**/README.md and examples/*/README.md runs as written, or says why it cannot.

How a page is run. Its blocks run in order, as a user following the page from the top would, in a
fresh folder laid out like a clone of the repository (`training_configs/`, `scripts/`, `examples/`,
`benchmarks/` and `.allennlp_plugins` as the repository ships them) with the small files of
`PROVIDED` under the names the docs use for "your data" (`corpus/train.txt`, `conll2003/eng.train`,
...). The `python` and `allennlp` of a block are those of the environment running the tests, and
they import this tree. Shell blocks run under `set -euo pipefail`, with every `ELMOC_*` variable
removed from the environment, so a block that reads a variable it never sets fails. README.md runs
first; the other pages start from what its walk-through leaves (`README_OUTPUTS`): the fastText
model `fasttext/vectors.bin`, the biLM `runs/elmoc/model.tar.gz` and the NER model
`runs/ner/model.tar.gz`, trained on the small files.

A block that cannot run here (an install, hours of training, a 7 GB `.bin`, a GPU) is marked on
the line before its fence with the reason:

    <!-- not run: needs the 7 GB crawl-300d-2M-subword.bin -->

A marker without a reason, a marker that is not followed by a block, a fence without a language
(output samples are ```text) and an unmarked block that is not run all fail. So do a page under
docs/ that README.md does not link to and a relative link to a file that is not there.
"""

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
LM_CORPUS = FIXTURES / "lm_corpus"

RUN_LANGUAGES = {"bash", "sh", "shell", "python"}
# Fences that are shown, never run: configs, data and output samples.
SHOWN_LANGUAGES = {"jsonnet", "json", "text", "console-output"}
MARKER = re.compile(r"^\s*<!--\s*not run\b(?P<rest>.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[^`\s]*)\s*$")
# What a page's blocks see as the repository (a symbolic link to this tree's folder).
LINKED = ["training_configs", "scripts", "examples", "benchmarks"]
# The names the docs give "your data", and the small files the test puts there.
TRAIN_TEXT = "".join(
    path.read_text(encoding="utf-8") for path in sorted(LM_CORPUS.glob("train-*.txt"))
)
CONLL = (FIXTURES / "downstream" / "conll2003.txt").read_text(encoding="utf-8")
PROVIDED = {
    "corpus/train.txt": TRAIN_TEXT,
    "corpus/valid.txt": (LM_CORPUS / "valid.txt").read_text(encoding="utf-8"),
    "domain/train.txt": (LM_CORPUS / "valid.txt").read_text(encoding="utf-8"),
    "domain/dev.txt": (LM_CORPUS / "train-00002-of-00002.txt").read_text(encoding="utf-8"),
    "conll2003/eng.train": CONLL,
    "conll2003/eng.testa": CONLL,
    "conll2003/eng.testb": CONLL,
}
# What README.md's walk-through leaves for the other pages.
README_OUTPUTS = ["fasttext/vectors.bin", "runs/elmoc/model.tar.gz", "runs/ner/model.tar.gz"]
BLOCK_TIMEOUT_S = 600


def documentation_files() -> List[Path]:
    pages = [REPO_ROOT / "README.md"]
    pages += sorted((REPO_ROOT / "docs").glob("*.md"))
    pages += sorted((REPO_ROOT / "training_configs").glob("**/README.md"))
    pages += sorted((REPO_ROOT / "examples").glob("*/README.md"))
    return pages


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    not_run_reason: Optional[str]

    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


class DocsFormatError(Exception):
    pass


def parse_blocks(page: Path) -> List[Block]:
    """The fenced blocks of `page`, each with the reason of its `not run` marker, if any."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: List[Block] = []
    pending_marker: Optional[int] = None
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = MARKER.match(line)
        if marker:
            if pending_marker is not None:
                raise DocsFormatError(
                    f"{page}:{pending_marker + 1}: a `not run` marker with no block after it"
                )
            rest = marker.group("rest").strip()
            if not rest.startswith(":") or len(rest[1:].split()) < 2:
                raise DocsFormatError(
                    f"{page}:{index + 1}: a `not run` marker needs a reason: <!-- not run: why -->"
                )
            pending_marker = index
            index += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if line.strip() and pending_marker is not None:
                raise DocsFormatError(
                    f"{page}:{pending_marker + 1}: a `not run` marker with no block after it"
                )
            index += 1
            continue
        language = fence.group("language").lower()
        start = index
        index += 1
        body: List[str] = []
        while index < len(lines) and lines[index].strip() != "```":
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise DocsFormatError(f"{page}:{start + 1}: a fence that is never closed")
        index += 1
        if language not in RUN_LANGUAGES | SHOWN_LANGUAGES:
            raise DocsFormatError(
                f"{page}:{start + 1}: fence language {language or '(none)'!r}: use one of "
                f"{sorted(RUN_LANGUAGES)} (run by tests/test_docs.py) or {sorted(SHOWN_LANGUAGES)}"
            )
        reason = None
        if pending_marker is not None:
            if language not in RUN_LANGUAGES:
                raise DocsFormatError(
                    f"{page}:{pending_marker + 1}: `not run` marker before a {language} block"
                )
            reason = MARKER.match(lines[pending_marker]).group("rest").strip()[1:].strip()
            pending_marker = None
        indent = len(fence.group("indent"))
        text = "\n".join(
            body_line[indent:] if body_line[:indent].isspace() else body_line for body_line in body
        )
        blocks.append(Block(page, start + 1, language, text + "\n", reason))
    if pending_marker is not None:
        raise DocsFormatError(
            f"{page}:{pending_marker + 1}: a `not run` marker with no block after it"
        )
    return blocks


def block_environment() -> Dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ELMOC_")}
    if "ELMOC_TEST_THREADS" in os.environ:
        environment["OMP_NUM_THREADS"] = os.environ["ELMOC_TEST_THREADS"]
    environment["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), environment.get("PATH", "")]
    )
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    environment.setdefault("TOKENIZERS_PARALLELISM", "false")
    environment.setdefault("HF_HUB_OFFLINE", "1")
    return environment


def make_workspace(folder: Path, readme_workspace: Optional[Path] = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        (folder / name).symlink_to(REPO_ROOT / name, target_is_directory=True)
    shutil.copy(REPO_ROOT / ".allennlp_plugins", folder / ".allennlp_plugins")
    for name, text in PROVIDED.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    if readme_workspace is not None:
        for name in README_OUTPUTS:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).symlink_to(readme_workspace / name)
    return folder


def run_block(block: Block, workspace: Path) -> None:
    if block.language == "python":
        command = [sys.executable, "-c", block.text]
    else:
        command = ["bash", "-c", "set -euo pipefail\n" + block.text]
    try:
        result = subprocess.run(
            command,
            cwd=workspace,
            env=block_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            universal_newlines=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where()}: the block ran past {BLOCK_TIMEOUT_S} s")
    if result.returncode != 0:
        pytest.fail(
            f"{block.where()}: the {block.language} block failed (exit {result.returncode}) in "
            f"{workspace}:\n{block.text}\n--- output (end) ---\n{result.stdout[-4000:]}"
        )


def run_page(page: Path, workspace: Path) -> List[Block]:
    blocks = [block for block in parse_blocks(page) if block.language in RUN_LANGUAGES]
    run = [block for block in blocks if block.not_run_reason is None]
    for block in run:
        run_block(block, workspace)
    return run


# ---------------------------------------------------------------------- the pages' format


@pytest.mark.parametrize("page", documentation_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_block_is_run_or_says_why_not(page):
    blocks = parse_blocks(page)
    for block in blocks:
        if block.language in RUN_LANGUAGES and block.not_run_reason is not None:
            assert len(block.not_run_reason) >= 10, f"{block.where()}: reason too short"


def test_the_format_rules_fail_as_described(tmp_path):
    def parse(text: str) -> List[Block]:
        page = tmp_path / "page.md"
        page.write_text(text, encoding="utf-8")
        return parse_blocks(page)

    blocks = parse(
        "<!-- not run: needs a 7 GB .bin -->\n```bash\nexit 1\n```\n\n```python\nx = 1\n```\n"
    )
    assert [(b.language, b.not_run_reason, b.text) for b in blocks] == [
        ("bash", "needs a 7 GB .bin", "exit 1\n"),
        ("python", None, "x = 1\n"),
    ]
    for bad, message in [
        ("<!-- not run -->\n```bash\nls\n```\n", "needs a reason"),
        ("<!-- not run: -->\n```bash\nls\n```\n", "needs a reason"),
        ("<!-- not run: an install step -->\ntext\n```bash\nls\n```\n", "no block after it"),
        ("<!-- not run: an install step -->\n", "no block after it"),
        ("```\nls\n```\n", "fence language '(none)'"),
        ("```bash\nls\n", "never closed"),
    ]:
        with pytest.raises(DocsFormatError, match=re.escape(message)):
            parse(bad)


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", documentation_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(page):
    targets = [
        target for target in LINK.findall(page.read_text(encoding="utf-8")) if "://" not in target
    ]
    missing = [target for target in targets if not (page.parent / target).exists()]
    assert not missing, f"{page.relative_to(REPO_ROOT)} links to files that do not exist: {missing}"


def test_readme_links_every_docs_page():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    linked = {
        (REPO_ROOT / target).resolve() for target in LINK.findall(readme) if "://" not in target
    }
    unlinked = [
        page.name
        for page in sorted((REPO_ROOT / "docs").glob("*.md"))
        if page.resolve() not in linked
    ]
    assert not unlinked, f"docs pages README.md does not link to: {unlinked}"


def test_readme_stays_a_guide():
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 350, f"README.md has {len(lines)} lines; move reference material to docs/"


# ---------------------------------------------------------------------- running them


@pytest.fixture(scope="module")
def readme_workspace(tmp_path_factory):
    """
    README.md's blocks, run from the top; what they leave is the other pages' starting point.

    Slow (~75 s, once per module): every block runs as written in a fresh shell or interpreter,
    really training fastText, the `elmoc_small` biLM and the NER tagger on the small files, because
    only running the page as a user would shows that it works as documented.
    """
    workspace = make_workspace(tmp_path_factory.mktemp("docs") / "readme")
    run = run_page(REPO_ROOT / "README.md", workspace)
    return workspace, run


def test_readme_walk_through(readme_workspace):
    """
    The walk-through trains fastText and a biLM on the small corpus and uses the biLM.

    Slow (~75 s, in the module-scoped `readme_workspace` setup): README.md's blocks run as written,
    each in a fresh process, really training fastText, the biLM and the NER tagger, because the
    outputs of those real runs are what shows the walk-through works as documented.
    """
    import h5py

    from elmoc_allennlp.fasttext.vectors import FastTextVectors

    workspace, run = readme_workspace
    assert len(run) >= 4
    # The plugin line is added once: the folder already listed the plugin, as the repository does.
    assert (workspace / ".allennlp_plugins").read_text(encoding="utf-8").split() == [
        "elmoc_allennlp"
    ]
    vectors = FastTextVectors(workspace / "fasttext" / "vectors.bin")
    corpus_words = set(TRAIN_TEXT.split())
    assert all(vectors.word_id(word) >= 0 for word in corpus_words)  # --min-count 1
    assert (workspace / "runs" / "elmoc" / "model.tar.gz").is_file()
    # The NER run reads task text as its fastText model was trained (lowercased), and says so (issue #48).
    ner_log = (workspace / "runs" / "ner" / "out.log").read_text(encoding="utf-8")
    vectors_file = (workspace / "fasttext" / "vectors.bin").resolve()
    assert (
        f"fastText indexer lowercases tokens (as the model; the model {vectors_file} is trained on lowercased"
        in (ner_log)
    )
    # The hdf5 export of the README: one dataset per line of sentences.txt, every layer.
    sentences = (workspace / "sentences.txt").read_text(encoding="utf-8").splitlines()
    with h5py.File(workspace / "vectors.hdf5", "r") as hdf5:
        for index, sentence in enumerate(sentences):
            num_layers, num_tokens, _ = hdf5[str(index)].shape
            assert num_tokens == len(sentence.split()) and num_layers == hdf5.attrs["num_layers"]


OTHER_PAGES = [
    page for page in documentation_files() if page.name != "README.md" or page.parent != REPO_ROOT
]


@pytest.mark.parametrize("page", OTHER_PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_page_runs_as_written(page, request, tmp_path):
    """
    A page's blocks run in order, as written, from what the README's walk-through leaves.

    Slow (~7-45 s a page; docs/pretraining.md ~45 s): each block is a real `allennlp` command or
    script in a fresh process (docs/pretraining.md trains the biLM three times: a domain fine-tune,
    then one direction at a time), because a page is only shown to work by running it as a user
    would.
    """
    blocks = [block for block in parse_blocks(page) if block.language in RUN_LANGUAGES]
    if all(block.not_run_reason is not None for block in blocks):
        return  # nothing to run; the reasons are checked above
    readme_folder, _ = request.getfixturevalue("readme_workspace")
    run_page(page, make_workspace(tmp_path / "workspace", readme_folder))
