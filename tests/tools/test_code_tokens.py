"""
`tools/code_tokens.py` (issue #50, part 5): counts code tokens only, whatever the comments,
docstrings and layout, and counts a git revision's tree as it counts the working tree.
"""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "code_tokens.py"
_spec = importlib.util.spec_from_file_location("code_tokens", SCRIPT)
code_tokens = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_tokens)


def _count(source: str) -> int:
    return code_tokens.count_tokens(textwrap.dedent(source).encode())


def test_counts_names_operators_and_literals():
    assert _count("x = 1\n") == 3
    assert _count("print(x, 'a')\n") == 6


def test_comments_docstrings_and_layout_do_not_count():
    plain = """
    class A:
        def f(self, x):
            return x + 1
    """
    documented = '''
    """The module's docstring."""
    # a comment


    class A:
        """The class's docstring,
        on two lines."""

        def f(
            self,
            x,  # the argument
        ):
            "The function's docstring" " in two parts."
            return x + 1
    '''
    # class A : def f ( self , x ) : return x + 1 -- the trailing comma black adds is one more
    assert _count(plain) == 15
    assert _count(documented) == 16


def test_strings_that_are_not_docstrings_count():
    source = """
    def f():
        x = 1
        "not a docstring: the function's second statement"
        return "a value"
    """
    assert _count(source) == 11
    assert _count('x = """a value"""\n') == 3


def test_an_f_string_is_one_token_on_every_python():
    assert _count("x = f'{a + b}: {c!r:>10}'\n") == 3


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _run(repo: Path, *args: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return completed.stdout


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text('"""Doc."""\nx = 1\n')
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = x + 2  # comment\n")
    (tmp_path / "pkg" / "notes.txt").write_text("not python = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return tmp_path


def test_counts_each_file_and_the_total_of_the_working_tree(repo):
    lines = _run(repo, "pkg").splitlines()
    assert [line.split() for line in lines] == [
        ["3", "pkg/a.py"],
        ["5", "pkg/sub/b.py"],
        ["8", "total"],
    ]


def test_counts_a_revision_and_the_working_tree_side_by_side(repo):
    (repo / "pkg" / "a.py").write_text('"""A longer docstring."""\n\nx = 1\n\n\nz = x\n')
    (repo / "pkg" / "c.py").write_text("w = 0\n")
    (repo / "pkg" / "sub" / "b.py").unlink()

    assert _run(repo, "pkg", "--rev", "HEAD").splitlines()[-1].split() == ["8", "total"]
    lines = [line.split() for line in _run(repo, "pkg", "--rev", "HEAD", "--worktree").splitlines()]
    assert lines == [
        ["HEAD", "worktree", "file"],
        ["3", "6", "pkg/a.py"],
        ["-", "3", "pkg/c.py"],
        ["5", "-", "pkg/sub/b.py"],
        ["8", "9", "total"],
    ]


def test_paths_are_relative_to_the_current_directory_for_a_revision_too(repo):
    worktree = _run(repo / "pkg", "sub").splitlines()
    assert worktree == _run(repo / "pkg", "sub", "--rev", "HEAD").splitlines()
    assert worktree[0].split() == ["5", "sub/b.py"]


def test_with_black_a_tree_formatted_by_hand_counts_as_formatted_by_black(tmp_path):
    pytest.importorskip("black")
    call = "result = function(" + ", ".join(f"argument_{i}" for i in range(12)) + ")\n"
    by_hand = tmp_path / "by_hand.py"
    by_hand.write_text(call)
    formatter = code_tokens.black_formatter()
    by_black = tmp_path / "by_black.py"
    by_black.write_bytes(formatter(call.encode()))
    # black explodes the 139-column call, one argument a line, and adds a trailing comma
    assert by_black.read_text().count("\n") == 14

    plain = code_tokens.count_tree([str(tmp_path)])
    assert plain[by_black.as_posix()] == plain[by_hand.as_posix()] + 1
    formatted = code_tokens.count_tree([str(tmp_path)], formatter=formatter)
    assert (
        formatted[by_black.as_posix()]
        == formatted[by_hand.as_posix()]
        == plain[by_black.as_posix()]
    )
