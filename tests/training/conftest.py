"""A small green project and hand-made bug tasks on it, with outcomes known in advance."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from frognano.synthesis.validate import unified_diff

from ..conftest import write_project
from ..runtime.conftest import tiny_dir, tiny_mlx, tiny_torch  # noqa: F401 - fixtures, re-exported

SOURCE = '''\
def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def neg(a):
    return -a
'''

WORDS = '''\
def shout(text):
    return text.upper() + "!"
'''

FILES = {
    "pyproject.toml": """
        [project]
        name = "arith"
        version = "0"
    """,
    "arith/__init__.py": "",
    "arith/ops.py": SOURCE,
    "arith/words.py": WORDS,
    "tests/test_words.py": """
        from arith.words import shout


        def test_shout():
            assert shout("hi") == "HI!"
    """,
    "tests/test_ops.py": """
        from arith.ops import add, mul, neg


        def test_add():
            assert add(2, 3) == 5


        def test_mul():
            assert mul(2, 3) == 6


        def test_neg():
            assert neg(4) == -4
    """,
}


def bug(old: str, new: str, path: str = "arith/ops.py", source: str = SOURCE) -> str:
    assert source.count(old) == 1
    return unified_diff(path, source, source.replace(old, new))


def task_row(iid: str, repo: Path | str, base: str, kind: str, patch: str, f2p: list[str], p2p: list[str],
             family: str = "binop-b1-function-d0") -> dict:
    return {"instance_id": iid, "repo": str(repo), "base_commit": base, "base_kind": kind, "patch": patch,
            "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "family": family, "operators": ["binop"]}


ADD = "tests/test_ops.py::test_add"
MUL = "tests/test_ops.py::test_mul"
NEG = "tests/test_ops.py::test_neg"
SHOUT = "tests/test_words.py::test_shout"


@pytest.fixture
def arith(tmp_path) -> Path:
    """The project, committed to git (HEAD is the clean tree)."""
    root = write_project(tmp_path / "arith", FILES)
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "clean"], check=True)
    return root


def head(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def arith_tasks(arith) -> list[dict]:
    """Two tasks: ``add`` subtracts (A), ``neg`` returns its argument (B)."""
    base = head(arith)
    return [
        task_row("arith.A", arith, base, "git", bug("return a + b", "return a - b"), [ADD], [MUL, NEG]),
        task_row("arith.B", arith, base, "git", bug("return -a", "return a"), [NEG], [ADD, MUL],
                 family="negate-b1-file-d1"),
    ]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path
