"""Synthesis end to end: real pytest runs through the real runner, then each task replayed on a
clean copy with plain pytest (the patch breaks exactly FAIL_TO_PASS, PASS_TO_PASS still pass)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from frognano.errors import UsageError
from frognano.operators import Mutation
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.spectra import CoverageMap
from frognano.sandbox.workspace import Workspace
from frognano.synthesis.store import read_tasks
from frognano.synthesis.synth import synthesize
from frognano.synthesis.validate import Rejection, validate

from ..conftest import EXAMPLES
from .conftest import IGNORE as _IGNORE



def _pytest(root: Path, nodeids: list[str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                             *(nodeids or [])], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)


def _outcomes(proc: subprocess.Popen) -> dict[str, str]:
    """nodeid -> PASSED/FAILED/ERROR from a plain pytest run."""
    stdout, _ = proc.communicate(timeout=120)
    found = {}
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            found[rest.split(" - ", 1)[0].strip()] = word
    return found


def check_tasks(repo: Path, out: Path, tmp_path: Path) -> list:
    """Replay every task with plain pytest (the patched copies run in parallel)."""
    tasks = list(read_tasks(out))
    assert tasks
    procs = [_pytest(repo)]
    for task in tasks:
        assert task.repo == str(repo.resolve())
        assert task.base_kind == "content" and len(task.base_commit) == 40
        assert task.family.endswith(f"-d{min(task.distance, 2)}") and task.n_fail == len(task.FAIL_TO_PASS)
        bugged = tmp_path / "bugged" / task.instance_id
        shutil.copytree(repo, bugged, ignore=_IGNORE)
        subprocess.run(["patch", "-p1", "-s", "-d", str(bugged)], input=task.patch, text=True, check=True)
        procs.append(_pytest(bugged, task.FAIL_TO_PASS + task.PASS_TO_PASS))
    clean, *afters = [_outcomes(p) for p in procs]
    for task, after in zip(tasks, afters):
        for n in task.FAIL_TO_PASS + task.PASS_TO_PASS:
            assert clean[n] == "PASSED", n  # the clean repository passes all of them
        assert {n for n, o in after.items() if o != "PASSED"} == set(task.FAIL_TO_PASS), task.patch
        assert all(after[n] == "PASSED" for n in task.PASS_TO_PASS)
    return tasks


def test_synthesise_from_calc(calc, tmp_path):
    out = tmp_path / "tasks.jsonl"
    summary = synthesize([calc], out, n=4, seed=7)
    assert summary.written == 4 and summary.per_repo[str(calc.resolve())] == 4
    assert sum(s.valid for s in summary.families.values()) == 4
    assert all(s.tried >= s.valid for s in summary.families.values())
    tasks = check_tasks(calc, out, tmp_path)
    assert len({t.instance_id for t in tasks}) == 4
    assert all(t.operators and t.file_lines > 0 for t in tasks)


# The other bundled examples, each with its shipped bug fixed (file, bug, fix).
FIXED = {"inventory": ("inventory/ledger.py", "range(first_day, last_day)", "range(first_day, last_day + 1)"),
         "shapes": ("src/shapes/geometry.py", "self.width * self.width", "self.width * self.height")}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_synthesise_from_the_other_examples(name, tmp_path):
    dest = tmp_path / name
    shutil.copytree(EXAMPLES / name, dest, ignore=_IGNORE)
    rel, bug, fix = FIXED[name]
    path = dest / rel
    assert bug in path.read_text()
    path.write_text(path.read_text().replace(bug, fix))
    out = tmp_path / "tasks.jsonl"
    summary = synthesize([dest], out, n=3, seed=1)
    assert summary.written == 3
    check_tasks(dest, out, tmp_path)


def test_synthesise_from_shop(shop, tmp_path):
    out = tmp_path / "tasks.jsonl"
    summary = synthesize([shop], out, n=5, seed=3)
    assert summary.written == 5
    tasks = check_tasks(shop, out, tmp_path)
    for t in tasks:
        assert not t.extra["bug_path"].startswith("tests/")
        assert t.extra["bug_function"] != "legacy_total"  # never covered


def test_resume_counts_existing_tasks(calc, tmp_path):
    out = tmp_path / "tasks.jsonl"
    assert synthesize([calc], out, n=2, seed=1).written == 2
    again = synthesize([calc], out, n=3, seed=1)
    assert again.existing == 2 and again.written == 1
    assert len(list(read_tasks(out))) == 3
    done = synthesize([calc], out, n=3, seed=1)
    assert done.existing == 3 and done.written == 0 and not done.families


def test_red_baseline_is_refused(tmp_path):
    red = tmp_path / "red"
    shutil.copytree(EXAMPLES / "calc", red, ignore=_IGNORE)  # is_adult(18) fails as shipped
    with pytest.raises(UsageError, match="fail before any mutation"):
        synthesize([red], tmp_path / "t.jsonl", n=1, seed=0)
    assert not list(read_tasks(tmp_path / "t.jsonl"))


# --- validate on hand-made mutants ------------------------------------------------------------

VALUE = '''def value():
    return 1


def other():
    return 2
'''
VALUE_TESTS = '''from pkg.core import other, value


def test_value():
    assert value() == 1


def test_other():
    assert other() == 2
'''


@pytest.fixture
def tiny(make_project):
    root = make_project({"pkg/__init__.py": "", "pkg/core.py": VALUE, "tests/test_core.py": VALUE_TESTS})
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=20)) as runner:
            baseline = runner.run(None, coverage=True)
            assert baseline.ok
            yield ws, runner, baseline, CoverageMap.from_run(baseline)


def _mutation(new: str, old: str = "return 1") -> Mutation:
    return Mutation("constant", "pkg/core.py", VALUE.index(old), old, new, 2, 2, "value", "hand-made")


def test_flaky_mutant_never_becomes_a_task(tiny):
    ws, runner, baseline, coverage = tiny
    marker = ws.shadow / "ran-once"  # in the shadow: the sandbox lets tests write nowhere else
    # Wrong (2) the first time it runs, right (1) ever after: a non-deterministic failure.
    new = (f"return 1 + (not __import__('os').path.exists({str(marker)!r}) "
           f"and not open({str(marker)!r}, 'w').close())")
    got = validate(ws, runner, baseline, coverage, _mutation(new), timeouts={}, rng=random.Random(0))
    assert isinstance(got, Rejection) and got.reason == "flaky"
    assert marker.exists()


def test_hanging_mutant_is_bounded_by_the_timeout(tiny):
    ws, runner, baseline, coverage = tiny
    timeouts = {n: 1.0 for n in baseline.tests}
    started = time.monotonic()
    got = validate(ws, runner, baseline, coverage, _mutation("while True:\n        pass"),
                   timeouts=timeouts, rng=random.Random(0))
    assert isinstance(got, Rejection) and got.reason == "timeout"
    assert time.monotonic() - started < 15
    assert ws.read("pkg/core.py") == VALUE  # the shadow is restored


def test_valid_mutant_records_the_task(tiny):
    ws, runner, baseline, coverage = tiny
    got = validate(ws, runner, baseline, coverage, _mutation("return 0"), timeouts={},
                   rng=random.Random(0), base=("ab" * 20, "content"), repo="demo/tiny")
    assert not isinstance(got, Rejection)
    assert got.FAIL_TO_PASS == ["tests/test_core.py::test_value"]
    assert got.PASS_TO_PASS == ["tests/test_core.py::test_other"]  # sampled from the others
    assert got.family == "constant-b1-function-d0" and got.distance == 0
    assert got.patch.startswith("diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n")
    assert "-    return 1\n+    return 0\n" in got.patch


def test_surviving_mutant_is_rejected(tiny):
    ws, runner, baseline, coverage = tiny
    got = validate(ws, runner, baseline, coverage, _mutation("return (1)"), timeouts={},
                   rng=random.Random(0))
    assert isinstance(got, Rejection) and got.reason == "no test fails"


# --- the command --------------------------------------------------------------------------------

def test_cli_synth(calc, tmp_path):
    from frognano.cli.synth import synth_command

    out = tmp_path / "t.jsonl"
    result = CliRunner().invoke(synth_command, [str(calc), "-o", str(out), "-n", "2", "--seed", "4"])
    assert result.exit_code == 0, result.output
    assert "tried" in result.output and "2/2" in result.output
    assert len(list(read_tasks(out))) == 2


def test_cli_synth_errors_exit_2(tmp_path):
    from frognano.cli.synth import synth_command

    red = tmp_path / "red"
    shutil.copytree(EXAMPLES / "calc", red, ignore=_IGNORE)
    for args in ([str(red)], [str(tmp_path / "missing")]):
        result = CliRunner().invoke(synth_command, [*args, "-o", str(tmp_path / "t.jsonl"), "-n", "1"])
        assert result.exit_code == 2
        text = result.output + (result.stderr if hasattr(result, "stderr") else "")
        assert "error:" in text


@pytest.mark.slow
def test_workers_give_the_same_tasks(calc, tmp_path):
    """Same seed, same tasks, whether validated in one process or in a pool."""
    one = synthesize([calc], tmp_path / "one.jsonl", n=3, seed=11)
    two = synthesize([calc], tmp_path / "two.jsonl", n=3, seed=11, workers=2)
    again = synthesize([calc], tmp_path / "again.jsonl", n=3, seed=11)
    assert one.written == two.written == again.written == 3
    ids = lambda p: [t.instance_id for t in read_tasks(p)]  # noqa: E731
    assert ids(tmp_path / "one.jsonl") == ids(tmp_path / "two.jsonl") == ids(tmp_path / "again.jsonl")
