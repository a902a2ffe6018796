"""What `frognano fix` prints, as a newcomer meets it: piped (not a terminal), 80 columns.

Every test runs the real command in a subprocess on a small real project.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from frognano.repair import lastfix
from frognano.repair.patch import EpisodeRecord, FileEdit, Fix, Patch, Verification

from ..conftest import snapshot

LONG = "x" * 110  # a line far wider than the 80 columns


def cli(*args: str, cwd: Path | None = None, merged: bool = False, **env: str) -> subprocess.CompletedProcess:
    """``python -m frognano ARGS`` with stdout and stderr piped, as in a CI log, at 80 columns."""
    return subprocess.run([sys.executable, "-m", "frognano", *args], cwd=cwd, text=True, timeout=300,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                          env={**os.environ, "COLUMNS": "80", "TERM": "dumb", **env})


UNFIXABLE = {  # no catalogue edit turns "bye" into "hello"; two tests fail
    "greet.py": 'def greet(name):\n    return "bye " + name\n\n\ndef shout(name):\n    return "BYE " + name\n',
    "tests/test_greet.py": ("from greet import greet, shout\n\n\ndef test_greet():\n    assert greet('ann') == 'hello ann'\n\n\n"
                            "def test_shout():\n    assert shout('ann') == 'HELLO ann'\n"),
}


def test_long_diff_lines_are_whole_at_80_columns_when_piped(example):
    project = example("calc")
    stats = project / "calc" / "stats.py"
    stats.write_text(stats.read_text().replace("return age > 18", f"return age > 18  # {LONG}"))
    proc = cli("fix", str(project))
    assert proc.returncode == 0, proc.stderr
    assert f"-    return age > 18  # {LONG}\n" in proc.stdout
    assert f"+    return age >= 18  # {LONG}\n" in proc.stdout
    assert "…" not in proc.stdout


def test_diagnosis_comes_before_the_search_and_v_logs_progress_as_plain_lines(example):
    proc = cli("fix", str(example("calc")), "-v", merged=True)
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    assert "\x1b[" not in out  # no cursor or colour codes in a pipe
    found = out.index("Suspicious lines")
    search = out.index("frognano: searching for a fix\n")
    assert out.index("1 failing test (of 7)") < found < search < out.index("✓ Verified fix")
    assert "frognano: running the tests" in out and "frognano: 7 tests ran, 1 failing" in out
    assert re.search(r"frognano: searching for a fix: \d+ of \d+ tried; best so far: calc/stats.py:15 ", out)
    assert "debug" not in out


@pytest.mark.slow
def test_quiet_by_default_and_debug_with_vv(example):
    project = example("calc")
    quiet = cli("fix", str(project))
    assert quiet.returncode == 0 and quiet.stderr == ""  # not even a blank line
    debug = cli("fix", str(project), "-vv")
    assert "frognano: debug: frognano." in debug.stderr
    assert "frognano: frognano.repair.engine: 7 tests ran" in debug.stderr


def test_json_carries_messages_suspects_and_closest_candidates(make_project):
    root = make_project(UNFIXABLE)
    proc = cli("fix", str(root), "--json")
    assert proc.returncode == 1 and proc.stderr == ""
    out = json.loads(proc.stdout)
    assert out["status"] == "unfixed"
    by_test = {f["test"]: f for f in out["failures"]}
    assert by_test["tests/test_greet.py::test_greet"]["message"].startswith("AssertionError: assert 'bye ann' == 'hello ann'")
    assert by_test["tests/test_greet.py::test_greet"]["line"] == 5
    assert {s["path"] for s in out["suspicious"]} == {"greet.py"}
    assert isinstance(out["candidates"], list)
    assert out["message"].lower().count("no verified fix") == 1


def test_json_candidates_are_the_partial_fixes(make_project):
    # Each function has its own bug: one edit fixes one test, never both, and pairs are off.
    root = make_project({
        "m.py": "def lo(x):\n    return x > 1\n\n\ndef hi(x):\n    return x < 9\n",
        "tests/test_m.py": ("from m import hi, lo\n\n\ndef test_lo():\n    assert lo(1)\n\n\n"
                            "def test_hi():\n    assert hi(9)\n"),
        "pyproject.toml": "[tool.frognano]\nmax_pairs = 0\n",
    })
    out = json.loads(cli("fix", str(root), "--json").stdout)
    assert out["status"] == "unfixed" and out["candidates"]
    best = out["candidates"][0]
    assert len(best["fixed"]) == 1 and best["broken"] == [] and best["verified"] is False
    assert best["diff"].startswith("--- a/m.py")


def test_unfixed_wording_names_what_ran_out_and_suggests_next_steps(make_project):
    files = dict(UNFIXABLE, **{"pyproject.toml": "[tool.frognano]\nmax_pairs = 2\n"})
    root = make_project(files)
    proc = cli("fix", str(root))
    assert proc.returncode == 1
    out = proc.stdout
    (line,) = [ln for ln in out.splitlines() if ln.startswith("No verified fix")]
    assert line.lower().count("no verified fix") == 1
    tried = re.search(r"\((\d+) candidates, [\d.]+ s\)", line)
    singles = re.search(r"tried (\d+) single edits and used its budget of 2 pairs of edits", line)
    assert tried and singles and int(tried[1]) == int(singles[1]) + 2, line
    assert "2 failing tests (of 2)" in out
    steps = out[out.index("Next steps"):]
    assert f"frognano fix {root} --model SPEC" in steps and "max_pairs" in steps
    assert f"frognano fix {root} -k EXPR" in steps


def test_singular_counts(make_project):
    root = make_project({"m.py": "def one():\n    return 2\n\n\ndef two():\n    return 2\n",
                         "tests/test_m.py": ("from m import one, two\n\n\ndef test_one():\n    assert one() == 1\n\n\n"
                                             "def test_two():\n    assert two() == 2\n")})
    out = cli("fix", str(root)).stdout
    assert "1 failing test now passes, 1 test still passes" in out and "1 tests" not in out
    (root / "m.py").write_text("def one():\n    return 1\n\n\ndef two():\n    return 2\n")
    (root / "tests" / "test_m.py").write_text("from m import one\n\n\ndef test_one():\n    assert one() == 1\n")
    assert "the 1 selected test passes; nothing to fix" in cli("fix", str(root)).stdout


def test_model_episodes_have_their_own_heading(make_project, tmp_path):
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(['<tool_call>{"name": "submit", "arguments": {}}</tool_call>']))
    # One turn: the submit (of nothing, refused) ends the episode at its turn budget.
    root = make_project({**UNFIXABLE, "pyproject.toml": "[tool.frognano]\nmax_turns = 1\n"})
    proc = cli("fix", str(root), "--model", f"replay:{replies}", "--episodes", "1")
    out = proc.stdout
    suspects = out[out.index("Suspicious lines"):out.index("Model episodes")]
    assert "episode" not in suspects
    assert re.search(r"Model episodes\n  episode 1: turn_budget, 1 turn, 0 malformed calls, \d+ tokens — ", out), out
    assert "let a model try" not in out  # one did


def test_missing_model_is_said_first_in_one_line_and_the_diagnosis_stays(example):
    project = example("calc")
    proc = cli("fix", str(project), "--model", "torch:/missing/model", "-v", merged=True)
    out = proc.stdout
    (error,) = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert "torch:/missing/model: no such model folder" in error and "searching without it" in error
    assert out.index(error) < out.index("frognano: running the tests")
    assert "1 failing test (of 7)" in out and "Suspicious lines" in out
    assert proc.returncode == 0 and "✓ Verified fix" in out  # the search alone found it


@pytest.mark.slow
def test_unreachable_endpoint_is_an_error_that_keeps_the_diagnosis(make_project):
    root = make_project(UNFIXABLE)
    model = "openai:m@http://127.0.0.1:9/v1"  # port 9 (discard): nothing listens
    proc = cli("fix", str(root), "--model", model)
    assert proc.returncode == 2
    (error,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "cannot reach http://127.0.0.1:9/v1" in error
    assert "2 failing tests (of 2)" in proc.stdout and "Suspicious lines" in proc.stdout
    assert "the model was not used (see the error above)" in proc.stdout
    assert "--model SPEC" not in proc.stdout  # not suggested: one was given and could not be used
    out = json.loads(cli("fix", str(root), "--model", model, "--json").stdout)
    assert out["status"] == "error" and "cannot reach" in out["message"]
    assert len(out["failures"]) == 2 and out["suspicious"]


def _model_fix(root: Path) -> Fix:
    """A fix no operator finds, as a model episode would have verified it."""
    before = (root / "greet.py").read_text()
    after = before.replace('"bye "', '"hello "').replace('"BYE "', '"HELLO "')
    return Fix(Patch((FileEdit("greet.py", before, after),)),
               Verification(["tests/test_greet.py::test_greet", "tests/test_greet.py::test_shout"], 0),
               "model", record=EpisodeRecord(1, None))


def test_apply_writes_the_kept_fix_without_searching_again(make_project):
    root = make_project(UNFIXABLE)
    fix = _model_fix(root)
    context = {"k": None, "test_args": [], "python": None}
    lastfix.save(root, fix, fix.verified.fail_to_pass, lastfix.fingerprint(root), context)
    proc = cli("fix", str(root), "--apply", "-v")
    assert proc.returncode == 0, proc.stderr
    assert "running the tests" not in proc.stderr and "searching" not in proc.stderr
    assert "applied without a new search" in proc.stderr
    assert "Applied to greet.py" in proc.stdout and "(model)" in proc.stdout
    assert (root / "greet.py").read_text() == fix.patch.edits[0].after
    assert lastfix.load(root) is None  # used once


def test_apply_searches_again_when_a_file_changed(make_project):
    root = make_project(UNFIXABLE)
    fix = _model_fix(root)
    lastfix.save(root, fix, fix.verified.fail_to_pass, lastfix.fingerprint(root),
                 {"k": None, "test_args": [], "python": None})
    (root / "notes.py").write_text("X = 1\n")  # any file: the tests could depend on it
    before = snapshot(root)
    proc = cli("fix", str(root), "--apply", "-v")
    assert "notes.py changed since the last verified fix; searching again" in proc.stderr
    assert "frognano: searching for a fix" in proc.stderr
    assert proc.returncode == 1 and snapshot(root) == before  # the search alone finds nothing


def test_fix_then_apply_reuses_the_search_fix_and_hint_says_how(example):
    project = example("calc")
    shown = cli("fix", str(project), "-k", "adult")
    assert f"Apply it with: frognano fix {project} -k adult --apply" in shown.stdout
    applied = cli("fix", str(project), "-k", "adult", "--apply", "-v")
    assert applied.returncode == 0 and "applied without a new search" in applied.stderr
    assert "return age >= 18" in (project / "calc" / "stats.py").read_text()


def test_help_shows_whole_summaries_and_the_default_path():
    proc = cli("--help")
    commands = proc.stdout[proc.stdout.index("Commands:"):]
    assert "..." not in commands and "…" not in commands
    text = " ".join(commands.split())
    assert ("watch Watch PATH (default: the current folder): on every change run the affected tests, "
            "and on failure find a verified fix.") in text
    assert "fix Find, verify and print a fix for the failing tests of the project at PATH " \
           "(default: the current folder)." in text
    fix_help = " ".join(cli("fix", "--help").stdout.split())
    assert "-v, --verbose Log what happens (-vv for debug detail)." in fix_help


def test_undo_and_fix_report_a_missing_path_alike(tmp_path):
    missing = str(tmp_path / "nope")
    fix, undo = cli("fix", missing), cli("undo", missing)
    assert fix.returncode == undo.returncode == 2
    assert fix.stderr == undo.stderr == f"error: {missing}: no such directory\n"
