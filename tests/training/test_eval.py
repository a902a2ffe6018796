"""``frognano eval``: a scripted model whose outcomes are known in advance, every metric exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from frognano.training.evaluate import EvalPlan, evaluate
from frognano.training.metrics import summarize
from frognano.training.tasks import load_tasks

from ..conftest import CHILD_TIMEOUT
from .conftest import MUL, write_jsonl


def _call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


OPS = "arith/ops.py"
# Two tasks (A: add subtracts; B: neg returns its argument), two episodes each, in order.
SCRIPT = [
    # A, episode 0: fix, test, submit -> resolved in 3 turns.
    _call("edit", path=OPS, old="return a - b", new="return a + b"),
    _call("run_tests"),
    _call("submit"),
    # A, episode 1: a malformed reply, the fix, a passing run, then an edit that breaks mul:
    # every test passed at some point, yet the final patch regresses -> a lost solution.
    "I would change the subtraction.",
    _call("edit", path=OPS, old="return a - b", new="return a + b"),
    _call("run_tests"),
    _call("edit", path=OPS, old="return a * b", new="return a + b"),
    _call("submit"),
    # B, episode 0: a failed edit, then the fix -> resolved after an error (recovery).
    _call("edit", path=OPS, old="return -b", new="return -a"),
    _call("edit", path=OPS, old="    return a\n", new="    return -a\n"),
    _call("submit"),
    # B, episode 1: the same read twice, then submit with nothing changed, refused three times
    # in a row (submit is offered only once a file is changed) -> looping, unresolved, no patch.
    _call("read", path=OPS),
    _call("read", path=OPS),
    _call("submit"),
    _call("submit"),
    _call("submit"),
]


@pytest.fixture
def scripted(tmp_path, arith_tasks):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", arith_tasks)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    return tasks, f"replay:{script}"


def test_a_scripted_model_gives_exactly_the_metrics_known_in_advance(scripted, tmp_path):
    tasks_file, model = scripted
    tasks, problems = load_tasks(tasks_file)
    assert problems == []
    run = evaluate(tasks, EvalPlan("model", model, episodes=2, settings={"lanes": 1}), out=tmp_path / "r.jsonl")
    by = {(r["instance_id"], r["episode"]): r for r in run.rows}
    assert {k: r["status"] for k, r in by.items()} == {
        ("arith.A", 0): "resolved", ("arith.A", 1): "unresolved",
        ("arith.B", 0): "resolved", ("arith.B", 1): "unresolved"}
    a1, b0, b1 = by["arith.A", 1], by["arith.B", 0], by["arith.B", 1]
    assert (a1["regressions"], a1["ever_passed"], a1["invalid_calls"], a1["turns"]) == ([MUL], True, 1, 5)
    assert (b0["met_error"], b0["turns"], b0["source"]) == (True, 3, "model")
    assert (b1["has_patch"], b1["identical_retries"], b1["episode_status"]) == (False, 3, "looping")
    assert (b1["met_error"], b1["turns"]) == (True, 5)
    s = summarize(run.rows).overall
    assert (s.tasks, s.episodes, s.errors, s.resolved) == (2, 4, 0, 2)
    assert s.resolve_rate == 0.5
    assert s.pass_at == {1: 0.5, 2: 1.0}  # each task: 1 of 2 attempts; pass@2 = 1 - C(1,2)/C(2,2)
    assert s.pass_hat == {1: 0.5, 2: 0.0}
    assert s.sr_at == {1: 0.0, 2: 0.0, 4: 0.5, 5: 0.5}  # both wins took 3 turns; the longest episode 5
    assert s.error_recovery_rate == 0.5  # B0 met a failed edit and still resolved; B1 never recovered
    assert s.regression_rate == pytest.approx(1 / 3)  # A1 among the three episodes with a patch
    assert s.lost_solution_rate == 0.5  # A0 and A1 passed everything once; A1 lost it
    assert s.identical_retry_rate == pytest.approx(3 / 16)  # B1: read, read; submit, submit, submit
    assert s.invalid_call_rate == pytest.approx(1 / 16)
    assert s.mean_turns == 4
    assert s.mean_tokens > 0


def test_an_interrupted_run_resumes_without_repeating_or_double_counting(scripted, tmp_path):
    tasks_file, _ = scripted
    tasks, _ = load_tasks(tasks_file)
    out = tmp_path / "r.jsonl"
    plan = EvalPlan("search", settings={"lanes": 1})
    first = evaluate(tasks[:1], plan, out=out)  # interrupted after the first task
    assert (first.ran, first.skipped) == (1, 0)
    rows = out.read_text().splitlines()
    out.write_text(rows[0] + "\n" + '{"instance_id": "arith.B", "epis')  # killed mid-write
    again = evaluate(tasks, plan, out=out)
    assert (again.ran, again.skipped) == (1, 1)  # only B runs; the cut line is ignored
    assert sorted(r["instance_id"] for r in again.rows) == ["arith.A", "arith.B"]
    assert summarize(again.rows).overall.episodes == 2
    # An errored episode is run again, and its new row is the one that counts.
    lines = out.read_text().splitlines()
    errored = {**json.loads(lines[-1]), "status": "error", "error": "runner lost"}
    out.write_text("\n".join([*lines[:-1], json.dumps(errored)]) + "\n")
    third = evaluate(tasks, plan, out=out)
    assert (third.ran, third.skipped) == (1, 1)
    assert summarize(third.rows).overall.errors == 0
    with pytest.raises(Exception, match="another run"):
        evaluate(tasks, EvalPlan("search", seed=7), out=out)


def _strip(rows: list[dict]) -> list[tuple]:
    return sorted((r["instance_id"], r["status"], r["patch"]) for r in rows)


def _frognano(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow
def test_eval_cli_names_bad_rows_and_task_errors_and_goes_on(arith_tasks, arith, tmp_path):
    good, other = arith_tasks
    rows = [
        good,
        {**other, "instance_id": "missing.repo", "repo": "someone/nowhere"},
        {**good, "instance_id": "hash.mismatch", "base_kind": "content", "base_commit": "ab" * 20},
        "{not json",
        {k: v for k, v in other.items() if k != "FAIL_TO_PASS"},
    ]
    tasks = write_jsonl(tmp_path / "tasks.jsonl", rows)
    done = _frognano("eval", str(tasks), "--search-only", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report["skipped_rows"]) == 2
    assert report["skipped_rows"][0].startswith(f"{tasks}:4: ")
    assert "FAIL_TO_PASS" in report["skipped_rows"][1] and ":5: " in report["skipped_rows"][1]
    errors = {e["instance_id"]: e for e in report["errors"]}
    assert "nowhere" in errors["missing.repo"]["error"] and errors["missing.repo"]["kind"] == "task"
    assert "does not match" in errors["hash.mismatch"]["error"]
    assert report["overall"]["errors"] == 2 and report["overall"]["episodes"] == 1
    assert report["overall"]["resolved"] == 1  # the good task still ran: search fixes add
    table = _frognano("eval", str(tasks), "--search-only", cwd=tmp_path)
    assert table.returncode == 0
    assert "rate [95% CI]" in table.stdout and "missing.repo" in table.stdout


def test_eval_cli_usage_errors(tmp_path, arith_tasks):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", arith_tasks)
    bad = _frognano("eval", str(tasks), "--search-only", "--episodes", "3", cwd=tmp_path)
    assert bad.returncode == 2 and "deterministic" in bad.stderr
    none = _frognano("eval", str(tasks), "--family", "nothing-*", cwd=tmp_path)
    assert none.returncode == 2 and "no tasks" in none.stderr
    spec = _frognano("eval", str(tasks), "--model", "gpt4", cwd=tmp_path)
    assert spec.returncode == 2 and "mlx:PATH_OR_ID" in spec.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one worker for every local Ray (tests/synthesis/test_ray.py)
def test_eval_through_a_real_local_ray_gives_the_local_rows(arith_tasks, tmp_path):
    pytest.importorskip("ray")
    tasks, _ = load_tasks(write_jsonl(tmp_path / "tasks.jsonl", arith_tasks))
    plan = EvalPlan("search", settings={"lanes": 1})
    local = evaluate(tasks, plan)
    remote = evaluate(tasks, plan, workers=2, ray="local")
    assert _strip(remote.rows) == _strip(local.rows)
    assert remote.ran == 2


def test_both_runs_the_model_only_where_the_search_finds_nothing(arith_tasks, tmp_path):
    tasks, _ = load_tasks(write_jsonl(tmp_path / "tasks.jsonl", arith_tasks))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([_call("edit", path=OPS, old="    return a\n", new="    return -a\n"),
                                  _call("submit")]))
    # The search fixes A (`-` back to `+`) but not B: no operator writes the missing unary minus.
    plan = EvalPlan("both", f"replay:{script}", settings={"lanes": 1, "max_pairs": 0})
    run = evaluate(tasks, plan)
    by = {r["instance_id"]: r for r in run.rows}
    assert (by["arith.A"]["status"], by["arith.A"]["source"], by["arith.A"]["turns"]) == ("resolved", "search", 0)
    assert (by["arith.B"]["status"], by["arith.B"]["source"], by["arith.B"]["turns"]) == ("resolved", "model", 2)
    assert by["arith.B"]["seconds"] > 0


@pytest.mark.slow
def test_local_workers_give_the_rows_of_one_process(arith_tasks, tmp_path):
    tasks, _ = load_tasks(write_jsonl(tmp_path / "tasks.jsonl", arith_tasks))
    plan = EvalPlan("search", settings={"lanes": 1})
    one = evaluate(tasks, plan)
    two = evaluate(tasks, plan, workers=2, out=tmp_path / "r.jsonl")
    assert _strip(two.rows) == _strip(one.rows)
    assert len(Path(tmp_path / "r.jsonl").read_text().splitlines()) == 2


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_eval_cli_with_a_real_tiny_model(arith_tasks, tmp_path, backend, request):
    folder = request.getfixturevalue(f"tiny_{backend}")
    tasks = write_jsonl(tmp_path / "tasks.jsonl", arith_tasks[:1])
    out = tmp_path / "r.jsonl"
    done = _frognano("eval", str(tasks), "--model", f"{backend}:{folder}", "--model-only", "--episodes", "2",
                     "--max-turns", "2", "--out", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # A random model does not repair anything, but its episodes are real: scored, not errors.
    assert report["overall"]["episodes"] == 2 and report["overall"]["errors"] == 0, report["errors"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["tokens_out"] > 0 and 1 <= r["turns"] <= 2 for r in rows)
    assert report["overall"]["pass_at"].keys() == {"1", "2"}
