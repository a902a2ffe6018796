"""Hint levels (a difficulty dial) and tasks of k bugs combined in one file."""

from __future__ import annotations

import dataclasses
import random

import pytest
from click.testing import CliRunner

from frognano.cli.synth import synth_command
from frognano.errors import UsageError
from frognano.operators import Mutation
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.spectra import CoverageMap
from frognano.sandbox.workspace import Workspace
from frognano.synthesis.frontier import Family
from frognano.synthesis.inject import candidate_bugs
from frognano.synthesis.store import Task, read_tasks
from frognano.synthesis.validate import baseline_timeouts, combine, hint_text, validate

from .test_synth import check_tasks


def _mutation(**kw) -> Mutation:
    base = dict(operator="compare", path="pkg/core.py", start=0, old="<", new="<=", line=3, end_line=3,
                function="Cart.total", description="`<` -> `<=`")
    return Mutation(**{**base, **kw})


def test_hint_text_levels():
    m = _mutation()
    tests = ["tests/test_core.py::test_total", "tests/test_core.py::test_empty"]
    fn, fl, te = (hint_text(m, level, tests=tests) for level in ("function", "file", "test"))
    assert "Cart.total" in fn and "pkg/core.py" in fn
    assert "pkg/core.py" in fl and "total" not in fl
    assert all(t in te for t in tests) and "pkg/core.py" not in te and "Cart" not in te
    two = [m, _mutation(path="pkg/util.py", function="clamp")]
    assert "clamp" in hint_text(two, "function") and "Cart.total" in hint_text(two, "function")
    assert hint_text(two, "file") == "The bugs are in pkg/core.py, pkg/util.py"
    info = {"bug_path": "a.py", "bug_function": "f", "FAIL_TO_PASS": ["t.py::test_f"]}
    assert hint_text(info, "test") == "Failing test: t.py::test_f"
    assert hint_text(info, "file") == "The bug is in a.py"
    with pytest.raises(UsageError):
        hint_text(m, "line")


@pytest.fixture
def shop_session(shop):
    ws = Workspace(shop)
    ws.open()
    ws.sync()
    runner = TestRunner(ws, RunnerConfig())
    try:
        baseline = runner.run(None, coverage=True)
        assert not baseline.failing
        yield ws, runner, baseline, CoverageMap.from_run(baseline)
    finally:
        runner.close()
        ws.close()


def test_hint_level_sets_text_and_family(shop_session):
    ws, runner, baseline, coverage = shop_session
    timeouts = baseline_timeouts(baseline)
    for m in candidate_bugs(ws, coverage, seed=0):
        tasks = {h: validate(ws, runner, baseline, coverage, m, timeouts=timeouts, rng=random.Random(1),
                             hint=h) for h in ("function", "file", "test")}
        if all(isinstance(t, Task) for t in tasks.values()):
            break
    else:
        pytest.fail("no valid bug")
    assert {Family.from_key(t.family).hint for t in tasks.values()} == {"function", "file", "test"}
    assert len({t.family for t in tasks.values()}) == 3
    assert m.function in tasks["function"].hint and m.path in tasks["function"].hint
    assert tasks["file"].hint == f"The bug is in {m.path}"
    assert m.path not in tasks["test"].hint
    assert all(n in tasks["test"].hint for n in tasks["test"].FAIL_TO_PASS)
    assert len({t.key for t in tasks.values()}) == 1  # the same bug


def _first_combo(shop_session, shop, seed, partners, skip=lambda m, earlier: False):
    """Validate candidates in order; combine each valid bug with ``partners(m, earlier)`` (of the
    valid bugs before it) until a pair is a Task.  Returns (combination, its newer bug)."""
    ws, runner, baseline, coverage = shop_session
    timeouts = baseline_timeouts(baseline)
    earlier: list[Mutation] = []
    for m in candidate_bugs(ws, coverage, seed=seed):
        if skip(m, earlier) or not isinstance(validate(ws, runner, baseline, coverage, m, timeouts=timeouts,
                                                       rng=random.Random(0)), Task):
            continue
        for other in partners(m, earlier):
            got = combine(ws, runner, baseline, coverage, [m, other], k=2, timeouts=timeouts,
                          rng=random.Random(0), repo=str(shop.resolve()))
            if isinstance(got, Task):
                return got, m
        earlier.append(m)
    return None, None


def test_combine_two_bugs(shop_session, shop, tmp_path):
    ws, runner, baseline, coverage = shop_session
    timeouts = baseline_timeouts(baseline)
    combo, m = _first_combo(shop_session, shop, 3, lambda m, earlier: [e for e in earlier if e.path == m.path])
    assert combo is not None
    assert combo.n_bugs == 2 and len(combo.operators) == 2
    assert Family.from_key(combo.family).bugs == 2 and "-b2-" in combo.family
    assert len(combo.extra["bugs"]) == 2
    assert combo.patch.count("diff --git") == 1
    out = tmp_path / "combo.jsonl"
    out.write_text(combo.to_json() + "\n")
    check_tasks(shop, out, tmp_path)  # patch on a clean copy: exactly FAIL_TO_PASS fail
    # the same bug twice overlaps; a bug outside the module (package directory) does not combine
    assert combine(ws, runner, baseline, coverage, [m, m], k=2, timeouts=timeouts,
                   rng=random.Random(0)).reason == "overlapping edits"
    outside = dataclasses.replace(m, path="elsewhere/" + m.path)
    assert combine(ws, runner, baseline, coverage, [m, outside], k=2, timeouts=timeouts,
                   rng=random.Random(0)).reason == "different modules"


def test_combine_bugs_in_two_files_of_a_package(shop_session, shop, tmp_path):
    # one valid bug per file, each combined with those of the other files
    combo, _ = _first_combo(shop_session, shop, 5, lambda m, earlier: earlier,
                            skip=lambda m, earlier: any(e.path == m.path for e in earlier))
    assert combo is not None
    assert combo.patch.count("diff --git") == 2  # one patch, two files
    assert len({b["bug_path"] for b in combo.extra["bugs"]}) == 2
    assert combo.hint.startswith("The bugs are in ")
    out = tmp_path / "combo.jsonl"
    out.write_text(combo.to_json() + "\n")
    check_tasks(shop, out, tmp_path)


def test_cli_bugs_and_hint(shop, tmp_path):
    out = tmp_path / "tasks.jsonl"
    result = CliRunner().invoke(synth_command, [str(shop), "-o", str(out), "-n", "1", "--bugs", "2",
                                                "--hint", "file", "--seed", "3"])
    assert result.exit_code == 0, result.output
    tasks = list(read_tasks(out))
    assert len(tasks) == 1 and tasks[0].n_bugs == 2 and "-b2-file-" in tasks[0].family
    assert tasks[0].hint.startswith("The bug")
    check_tasks(shop, out, tmp_path)
