"""Batch B operators where they are used: `frognano synth` injects their bugs (new families in
its table and task keys), and `frognano fix` repairs bugs only they can fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from frognano.synthesis.store import read_tasks
from frognano.synthesis.synth import synthesize

from ..conftest import write_project

PYPROJECT = '[project]\nname = "textkit"\nversion = "0.1"\n'

GREEN = {
    "pyproject.toml": PYPROJECT,
    "textkit/__init__.py": "",
    "textkit/tools.py": '''
        def initials(names):
            parts = [n[0].upper() for n in names]
            return "".join(parts)


        def without_header(lines):
            return lines[1:]


        def drain(stack):
            out = []
            while stack:
                out.append(stack.pop())
            return out
        ''',
    "tests/test_tools.py": '''
        from textkit.tools import drain, initials, without_header


        def test_initials():
            assert initials(["ada", "bob"]) == "AB"


        def test_without_header():
            assert without_header(["h", "a", "b"]) == ["a", "b"]


        def test_drain():
            assert drain([1, 2, 3]) == [3, 2, 1]
        ''',
}


def test_synthesis_injects_with_the_new_operators(tmp_path):
    repo = write_project(tmp_path / "textkit", GREEN)
    out = tmp_path / "tasks.jsonl"
    summary = synthesize([repo], out, n=30, seed=3,
                         operators=["drop_return", "slice", "loop_condition", "insert_statement"])
    valid = {fam for fam, s in summary.families.items() if s.valid}
    assert {"return", "slice", "loop"} <= valid, summary.families
    tasks = list(read_tasks(out))
    assert {t.family.split("-")[0] for t in tasks} >= {"return", "slice", "loop"}
    # The task's patch is the injected bug: a return taken away.
    dropped = next(t for t in tasks if t.family.startswith("return-"))
    assert "\n-    return " in dropped.patch
    # Copied statements never read a name before the function binds it.
    for t in tasks:
        assert "+    out.append(stack.pop())\n     out = []" not in t.patch


def _fix(project: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--json"],
                          capture_output=True, text=True, timeout=300, env=os.environ.copy())
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_fix_adds_a_missing_return_and_a_loop_condition(tmp_path):
    project = write_project(tmp_path / "people", {
        "pyproject.toml": PYPROJECT.replace("textkit", "people"),
        "people/__init__.py": "",
        "people/names.py": '''
            from collections import deque


            def full_name(person):
                name = person["first"] + " " + person["last"]


            def reachable(graph, start):
                seen = {start}
                queue = deque([start])
                while True:
                    node = queue.popleft()
                    for nxt in graph[node]:
                        if nxt not in seen:
                            seen.add(nxt)
                            queue.append(nxt)
                return seen
            ''',
        "tests/test_names.py": '''
            from people.names import full_name


            def test_full_name():
                assert full_name({"first": "Ada", "last": "Lovelace"}) == "Ada Lovelace"
            ''',
    })
    report = _fix(project)
    assert report["status"] == "fixed", report
    assert "+    return name\n" in report["fix"]["diff"]

    (project / "tests" / "test_names.py").write_text(
        "from people.names import reachable\n\n\n"
        "def test_reachable():\n    assert reachable({1: [2], 2: [3], 3: []}, 1) == {1, 2, 3}\n")
    report = _fix(project)
    assert report["status"] == "fixed", report
    assert "+    while queue:\n" in report["fix"]["diff"]
