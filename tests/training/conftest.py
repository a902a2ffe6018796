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


# A deleted statement: the operator search cannot undo it, so `frognano fix --model` runs the
# model's episode (what the trained models' tests check).
COLLECT = {
    "collect.py": "def evens(xs):\n    out = []\n    for x in xs:\n        if x % 2 == 0:\n            pass\n    return out\n",
    "test_collect.py": "from collect import evens\n\n\ndef test_evens():\n    assert evens([1, 2, 4]) == [2, 4]\n",
}


def assert_fix_runs_the_model(frognano, tmp_path: Path, spec: str, pyproject: str | None = None) -> None:
    """``frognano fix --model SPEC`` (run by the test module's ``frognano`` helper) on COLLECT
    runs one model episode that ends without a model error."""
    files = {**COLLECT, **({"pyproject.toml": pyproject} if pyproject else {})}
    project = write_project(tmp_path / "collect", files)
    fixed = frognano("fix", str(project), "--model", spec, "--episodes", "1", "--json", cwd=tmp_path)
    report = json.loads(fixed.stdout)
    assert report["status"] in ("unfixed", "fixed"), report
    assert report["episodes"] and report["episodes"][0]["status"] != "model_error"
