"""
Counts the code tokens of Python files: what the interpreter reads, without comments, docstrings
or layout, so that a change's size is measured apart from its documentation and formatting.

A code token is a token of Python's `tokenize` other than COMMENT, NL, NEWLINE, INDENT, DEDENT,
ENCODING and ENDMARKER, and not part of a docstring (a string statement that is the first statement
of a module, class or function, as `ast.get_docstring` finds it).

    python tools/code_tokens.py elmoc_allennlp                 # the working tree
    python tools/code_tokens.py elmoc_allennlp --rev f6244f6   # a git revision's tree
    python tools/code_tokens.py elmoc_allennlp --rev f6244f6 --worktree   # both, side by side
    python tools/code_tokens.py elmoc_allennlp --rev f6244f6 --worktree --black

Black's layout has tokens of its own (the trailing comma of an exploded call, the parentheses of a
wrapped expression): `--black` formats every file with black, as `pyproject.toml` configures it,
before counting, so that a tree formatted by hand and one formatted by black compare by their code.

Prints one line per file (its count for each tree counted, then its path) and a last `total` line.
Paths are taken as git takes them: relative to the current directory.
"""

import argparse
import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

LAYOUT = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}
# Python 3.12 splits an f-string into tokens (3.14 a t-string too): it counts as one token, a
# STRING, as in Python 3.8-3.11, so that a tree's count does not depend on the interpreter.
STRING_STARTS = {
    getattr(tokenize, name)
    for name in ("FSTRING_START", "TSTRING_START")
    if hasattr(tokenize, name)
}
STRING_ENDS = {
    getattr(tokenize, name) for name in ("FSTRING_END", "TSTRING_END") if hasattr(tokenize, name)
}
WORKTREE = "worktree"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

Position = Tuple[int, int]


def _docstring_spans(tree: ast.AST) -> List[Tuple[Position, Position]]:
    """The (start, end) positions of every docstring in `tree`, as `tokenize` numbers them."""
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not node.body:
            continue
        first = node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            spans.append(
                ((first.lineno, first.col_offset), (first.end_lineno, first.end_col_offset))
            )
    return spans


def count_tokens(source: bytes) -> int:
    """The number of code tokens in the Python source `source`."""
    spans = _docstring_spans(ast.parse(source))
    count = 0
    nesting = 0  # inside an f-string (Python 3.12+ splits it into tokens; earlier ones do not)
    for token in tokenize.tokenize(io.BytesIO(source).readline):
        if token.type in STRING_ENDS:
            nesting -= 1
            continue
        if nesting or token.type in LAYOUT:
            nesting += token.type in STRING_STARTS
            continue
        nesting += token.type in STRING_STARTS
        if any(start <= token.start and token.end <= end for start, end in spans):
            continue
        count += 1
    return count


def _worktree_files(paths: Sequence[str]) -> Iterator[Tuple[str, bytes]]:
    for path in paths:
        root = Path(path)
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for file in files:
            yield file.as_posix(), file.read_bytes()


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], check=True, capture_output=True).stdout


def _revision_files(revision: str, paths: Sequence[str]) -> Iterator[Tuple[str, bytes]]:
    names = _git("ls-tree", "-r", "--name-only", revision, "--", *paths).decode().splitlines()
    for name in sorted(names):
        if name.endswith(".py"):
            yield name, _git("show", f"{revision}:./{name}")


def black_formatter() -> Callable[[bytes], bytes]:
    """Formats a file's source as black does with the settings of the project's `pyproject.toml`."""
    import black

    settings = black.parse_pyproject_toml(str(PYPROJECT))
    mode = black.Mode(
        line_length=settings.get("line_length", black.DEFAULT_LINE_LENGTH),
        target_versions={
            black.TargetVersion[v.upper()] for v in settings.get("target_version", [])
        },
    )
    return lambda source: black.format_str(source.decode("utf-8"), mode=mode).encode("utf-8")


def count_tree(
    paths: Sequence[str],
    revision: Optional[str] = None,
    formatter: Optional[Callable[[bytes], bytes]] = None,
) -> Dict[str, int]:
    """
    The code tokens of each `.py` file under `paths` (files or folders), by path: of the working
    tree, or of the git revision `revision` when it is given; each file formatted by `formatter`
    first, if given.
    """
    files = _worktree_files(paths) if revision is None else _revision_files(revision, paths)
    return {
        name: count_tokens(formatter(source) if formatter else source) for name, source in files
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("paths", nargs="+", help="files or folders to count (their .py files)")
    parser.add_argument(
        "--rev",
        action="append",
        default=[],
        metavar="REV",
        help="count this git revision's tree instead of the working tree (may be repeated)",
    )
    parser.add_argument(
        "--worktree", action="store_true", help="with --rev: count the working tree too, last"
    )
    parser.add_argument(
        "--black",
        action="store_true",
        help="format each file with black (pyproject.toml's settings) before counting",
    )
    args = parser.parse_args(argv)
    formatter = black_formatter() if args.black else None

    sources: List[Optional[str]] = list(args.rev) or [None]
    if args.rev and args.worktree:
        sources.append(None)
    counts = [count_tree(args.paths, source, formatter) for source in sources]
    names: Set[str] = set().union(*counts)
    width = max(10, *(len(source or WORKTREE) for source in sources))

    if len(sources) > 1:
        print(" ".join(f"{source or WORKTREE:>{width}}" for source in sources), " file")
    for name in sorted(names):
        cells = (f"{tree[name]:>{width}}" if name in tree else f"{'-':>{width}}" for tree in counts)
        print(" ".join(cells), "", name)
    print(" ".join(f"{sum(tree.values()):>{width}}" for tree in counts), "", "total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
