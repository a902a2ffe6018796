"""Emacs's eglot (Debian's elpa-eglot 1.9, or Emacs 29's own) in a real batch Emacs against a
real `frognano serve`.

There is no FrogNano package for Emacs: a user puts `frognano serve` into
`eglot-server-programs` (with `:initializationOptions`) and uses eglot as it is.  The driver,
`emacs/driver.el`, does exactly that and then drives the server only through eglot's own
functions, as a user at the keyboard would: open calc/stats.py, start eglot, wait for flymake's
diagnostics, list the code actions at the diagnostic (`eglot-code-actions`), pick the verified
"FrogNano: ..." fix from eglot's code-action menu (so eglot applies its WorkspaceEdit and runs
its command, `frognano.runTests`), `save-buffer`, and wait for the diagnostics to clear.
Batch Emacs runs no idle timers, so the driver's waits run them itself (eglot sends
`didChange` from one), with a deadline.  It writes what it saw to a JSON file that the test
then checks step by step.  Parameters travel in environment variables.

Two more tests are cases eglot users hit: the fix applied but not saved (eglot runs the action's
command before its idle timer sends the didChange carrying the edit), and a project without
`.git`, where eglot's project is the file's own folder (calc/calc) and the server has to find
the project above it.

And a project whose fix takes minutes (slow_project.py): eglot runs every command as a
synchronous request with a 10 s timeout, so "Fix with FrogNano" must be answered at once (it
starts a job) while Emacs and the server stay usable during the search.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.editors.slow_project import ANSWER_S, SLOW_FILE, leftover_processes, slow_project

DRIVER = Path(__file__).resolve().parent / "emacs" / "driver.el"
EMACS = shutil.which("emacs")
INSTALL = "apt-get install emacs-nox elpa-eglot"

pytestmark = pytest.mark.skipif(EMACS is None, reason=f"emacs not installed ({INSTALL})")

INIT_OPTIONS = {"autoFix": "suggest", "debounceMs": 50, "python": sys.executable}
FIXED_LINE = "    return age >= 18"


def _run_emacs(tmp_path: Path, scenario: str, env_extra: dict[str, str], timeout: float) -> dict:
    result = tmp_path / f"result-{scenario}.json"
    env = {
        **os.environ,
        "FROGNANO_TEST_PYTHON": sys.executable,
        "FROGNANO_TEST_SCENARIO": scenario,
        "FROGNANO_TEST_RESULT": str(result),
        "FROGNANO_CACHE_DIR": str(tmp_path / "cache"),
        # user-emacs-directory and package-user-dir: nothing of the user's ~/.emacs.d.
        "FROGNANO_EMACS_HOME": str(tmp_path / "emacs.d"),
        **env_extra,
    }
    cmd = [EMACS, "--batch", "-Q", "-l", str(DRIVER)]
    try:
        # No terminal: a question from Emacs (y-or-n-p) fails at once instead of hanging.
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout)
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        output = f"emacs timed out after {timeout} s\n{exc.stdout or ''}{exc.stderr or ''}"
    if not result.exists():
        pytest.fail(f"emacs wrote no result.\n--- emacs output ---\n{output[-8000:]}")
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def eglot(tmp_path_factory) -> dict:
    """What the driver loads (eglot's file and version); skips where batch Emacs has no eglot."""
    tmp = tmp_path_factory.mktemp("eglot-probe")
    result = tmp / "result-probe.json"
    proc = subprocess.run([EMACS, "--batch", "-Q", "-l", str(DRIVER)], cwd=tmp, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FROGNANO_TEST_SCENARIO": "probe", "FROGNANO_TEST_RESULT": str(result),
                               "FROGNANO_EMACS_HOME": str(tmp / "emacs.d")})
    if not result.exists():
        output = proc.stdout + proc.stderr
        why = next((line for line in output.splitlines() if "error" in line.lower()), output[-300:])
        pytest.skip(f"batch Emacs cannot load eglot ({INSTALL}): {why.strip()[:300]}")
    return json.loads(result.read_text())


def _project(tmp_path: Path, git: bool, slow: bool = False) -> Path:
    if slow:
        project = slow_project(tmp_path / "slow")
    else:
        project = tmp_path / "calc"
        shutil.copytree(EXAMPLES / "calc", project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".frognano"))
    if git:
        if shutil.which("git") is None:
            pytest.skip("git not installed: eglot's project would not be the copy's root")
        subprocess.run(["git", "init", "-q", str(project)], check=True, capture_output=True)
    return project


def _env(project: Path, file: str, budget: float, **extra: str) -> dict[str, str]:
    return {"FROGNANO_TEST_ROOT": str(project), "FROGNANO_TEST_FILE": str(project / file),
            "FROGNANO_TEST_BUDGET_S": str(budget), **extra}


def _explain(r: dict) -> str:
    shown = {k: v for k, v in r.items() if k not in ("messages", "events", "stderr")}
    return (f"flow stopped at step {r.get('step')!r}: {r.get('error')}\n"
            f"--- result ---\n{json.dumps(shown, indent=1)}\n--- *Messages* ---\n{r.get('messages')}\n"
            f"--- eglot events (tail) ---\n{r.get('events')}\n--- server stderr (tail) ---\n{r.get('stderr')}")


def _summary(r: dict) -> str:
    return json.dumps({k: r.get(k) for k in ("step", "ok", "error", "timings", "elapsed")}, indent=1)


def _sent(r: dict) -> list[str]:
    """What eglot sent, in order: methods, executeCommand with its command."""
    return [f"{m['method']} {m['command']}" if m.get("command") else m["method"] for m in r["sent"]]


def _buffer_diags(r: dict, key: str = "diagnostics") -> set[tuple[int, str]]:
    return {(d["line"], d["type"]) for d in r[key]}


def _other_diags(r: dict, key: str = "other_diagnostics") -> set[tuple[str, int, str]]:
    return {(d["file"], d["line"], d["type"]) for d in r[key]}


def _check_until_fix(r: dict, project: Path) -> None:
    """The steps both fix flows share: connected to the git root, diagnostics, actions, the
    verified fix picked from eglot's menu and applied to the buffer."""
    # eglot's project is the git root; the server got it with the initialization options.
    assert r["project_kind"] == "vc" and r["project_root"] == f"{project}/", _explain(r)
    assert r["initialize"]["rootUri"] == project.as_uri(), _explain(r)
    assert r["initialize"]["initializationOptions"] == INIT_OPTIONS, _explain(r)
    assert r["server_info"]["name"] == "frognano"
    assert {"frognano.runTests", "frognano.fix"} <= set(r["server_commands"]), r["server_commands"]
    assert r["major_mode"] == "python-mode" and r["flymake_mode"] and r["flymake_started"], _explain(r)

    # flymake: a note at the suspicious line of the buggy source; the failing test's Error is
    # kept for its file, which is not visited (flymake-list-only-diagnostics).
    assert (15, "eglot-note") in _buffer_diags(r), _explain(r)
    # The note itself says which test fails and how (a flymake user sees it without opening the test).
    note = next(d for d in r["diagnostics"] if d["line"] == 15)
    assert "fails: tests/test_stats.py::test_is_adult[18-True]: " in note["text"], note
    assert all(d["lsp"]["source"] == "frognano" for d in r["diagnostics"])
    assert ("tests/test_stats.py", 17, "eglot-error") in _other_diags(r), _explain(r)

    # Code actions at the diagnostic: before the fix is known, search for one or run the tests.
    first = r["first_actions"]
    commands = {a["command"] for a in first}
    assert "frognano.runTests" in commands, first
    assert "frognano.fix" in commands or any(a["title"].startswith("FrogNano:") for a in first), first

    # The verified fix: marked by its data, preferred, a versioned edit of calc/stats.py, and the
    # command that re-runs its tests.
    fix = r["fix"]
    assert fix["title"].startswith("FrogNano:") and fix["hasEdit"] and fix["isPreferred"], fix
    assert fix["data"]["frognano"] == "verifiedFix" and fix["data"]["source"] == "search", fix
    assert fix["command"] == "frognano.runTests", fix
    changes = r["fix_changes"]
    assert changes and all(isinstance(c["textDocument"].get("version"), int) for c in changes), changes
    assert [c["textDocument"]["uri"] for c in changes] == [(project / "calc" / "stats.py").as_uri()]

    # eglot's own menu offered it, as the default (it is the preferred action).
    menu = r["menu"]
    assert fix["title"] in menu["items"] and f"(default {fix['title']})" in menu["prompt"], menu
    assert r["line15"] == FIXED_LINE and r["modified_after_apply"] is True, _explain(r)
    assert "workspace/executeCommand frognano.runTests" in _sent(r), _sent(r)


@pytest.mark.slow
def test_eglot_fix_flow(eglot, tmp_path):
    """Open, diagnostics, code actions, the verified fix through eglot's code-action menu, save,
    diagnostics cleared."""
    project = _project(tmp_path, git=True)
    r = _run_emacs(tmp_path, "flow", _env(project, "calc/stats.py", 45), timeout=60)
    print(_summary(r))
    assert r["ok"], _explain(r)
    _check_until_fix(r, project)

    # Saved: eglot sent didSave; the re-run passed and the server cleared every diagnostic.
    sent = _sent(r)
    assert sent.index("textDocument/didSave") > sent.index("workspace/executeCommand frognano.runTests"), sent
    assert r["modified_after_save"] is False
    assert r["remaining"] == [] and r["remaining_other"] == [] and r["step"] == "done", _explain(r)
    states = [s["state"] for s in r["statuses"]]
    assert {"running", "failing", "fixing", "fixed"} <= set(states) and states[-1] == "passing", states
    assert all(s["autoFix"] == "suggest" for s in r["statuses"]), r["statuses"]
    assert not r["shown"], r["shown"]  # nothing popped up along the way

    timings = r["timings"]
    assert timings["connected"] <= timings["diagnostics"] <= timings["fix_ready"] <= timings["applied"] \
        <= timings["saved"] <= timings["cleared"], timings
    # The fix action's re-run (frognano.runTests, through eglot-execute-command) was answered at
    # once, without an error: it starts the run (or waits for the edit) and reports later.
    runs = [c for c in r["commands"] if c["command"] == "frognano.runTests"]
    assert runs and all("error" not in c and c["seconds"] < ANSWER_S for c in runs), r["commands"]
    assert {c["result"].get("status") for c in runs} <= {"started", "waiting"}, runs

    # And the project on disk is really fixed.
    assert FIXED_LINE in (project / "calc" / "stats.py").read_text()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_eglot_fix_clears_without_save(eglot, tmp_path):
    """The fix applied through eglot's code action and not saved: the diagnostics still clear.

    eglot applies the edit, then runs the action's command (`frognano.runTests`) at once; the
    didChange carrying the edit goes out only from its idle timer (0.5 s) after that.  The
    server has to run the tests on the fixed buffer all the same.
    """
    project = _project(tmp_path, git=True)
    r = _run_emacs(tmp_path, "unsaved", _env(project, "calc/stats.py", 45, FROGNANO_TEST_CLEAR_S="20"),
                   timeout=60)
    print(_summary(r))
    print("sent:", _sent(r))
    print("statuses:", [(round(s["t"], 2), s["state"], s["failing"]) for s in r["statuses"]])
    assert r["step"] in ("clear", "done"), _explain(r)  # got as far as applying the fix
    _check_until_fix(r, project)
    sent = _sent(r)
    assert "textDocument/didSave" not in sent, sent
    assert r["modified"] is True  # still unsaved at the end
    assert "return age > 18" in (project / "calc" / "stats.py").read_text()  # the disk is untouched

    assert r["ok"], (f"the diagnostics did not clear within 20 s of applying the fix without a save\n"
                     f"remaining in stats.py: {sorted(_buffer_diags(r, 'remaining'))}\n"
                     f"remaining elsewhere: {sorted(_other_diags(r, 'remaining_other'))}\n"
                     f"eglot sent: {sent}\n"
                     f"statuses: {[(round(s['t'], 2), s['state'], s['failing'], s['message']) for s in r['statuses']]}\n"
                     + _explain(r))
    assert r["remaining"] == [] and r["remaining_other"] == [], _explain(r)
    assert r["statuses"][-1]["state"] == "passing", r["statuses"]


def test_eglot_project_without_git(eglot, tmp_path):
    """No .git: eglot's project is the opened file's folder (calc/calc), sent as the root; the
    server still finds the project (calc, with pyproject.toml) and shows the failures."""
    project = _project(tmp_path, git=False)
    package = project / "calc"
    r = _run_emacs(tmp_path, "diagnostics", _env(project, "calc/stats.py", 30), timeout=45)
    print(_summary(r))
    # What makes this case: eglot sends the package folder, not the project.
    assert r["project_kind"] == "transient" and r["project_root"] == f"{package}/", _explain(r)
    assert r["initialize"]["rootUri"] == package.as_uri(), r["initialize"]
    assert [f["uri"] for f in r["initialize"]["workspaceFolders"]] == [package.as_uri()], r["initialize"]

    assert r["ok"], _explain(r)
    assert (15, "eglot-note") in _buffer_diags(r), _explain(r)
    # The note itself says which test fails and how (a flymake user sees it without opening the test).
    note = next(d for d in r["diagnostics"] if d["line"] == 15)
    assert "fails: tests/test_stats.py::test_is_adult[18-True]: " in note["text"], note
    assert ("tests/test_stats.py", 17, "eglot-error") in _other_diags(r), _explain(r)
    states = [s["state"] for s in r["statuses"]]
    assert "failing" in states, states


@pytest.mark.slow
def test_eglot_slow_fix_answers_at_once(eglot, tmp_path):
    """"Fix with FrogNano" from eglot's code-action menu on a project whose fix takes minutes:
    eglot's synchronous executeCommand comes back at once with the started job (before, it froze
    Emacs for 10 s and failed with "Timed out"), the server says "fixing", and while the search
    runs the same command joins the job at once, code actions answer at once and Emacs's timers
    keep firing.  Then the user shuts eglot down with the fix still running: the server exits."""
    project = _project(tmp_path, git=True, slow=True)
    r = _run_emacs(tmp_path, "slowfix", _env(project, SLOW_FILE, 30, FROGNANO_TEST_AUTOFIX="off",
                                             FROGNANO_TEST_WATCH_S="4"), timeout=45)
    print(_summary(r))
    print("statuses:", [(round(s["t"], 2), s["state"], s["message"]) for s in r.get("statuses", [])])
    assert r["ok"], _explain(r)
    assert r["step"] == "done", _explain(r)
    assert r["initialize"]["initializationOptions"]["autoFix"] == "off"  # the user's command starts the fix
    assert "Fix with FrogNano" in [a["title"] for a in r["first_actions"]], r["first_actions"]
    assert "Fix with FrogNano" in r["menu"]["items"], r["menu"]

    # The command through eglot's own path: answered at once, no jsonrpc error ("Timed out").
    assert r["fix_command_error"] is None, r["fix_command_error"]
    fix, again = [c for c in r["commands"] if c["command"] == "frognano.fix"]
    assert "error" not in fix and fix["seconds"] < ANSWER_S and r["fix_command_s"] < ANSWER_S + 0.5, fix
    assert fix["result"]["status"] == "started" and fix["result"]["job"], fix
    # A second request for the same work joins the running job, at once too.
    assert "error" not in again and again["seconds"] < ANSWER_S, again
    assert again["result"] == {"status": "started", "job": fix["result"]["job"], "joined": True}, again

    # The search runs: the status says so, and still says so after watching it for 4 s (no result).
    states = [s["state"] for s in r["statuses"]]
    assert "failing" in states and states.index("fixing") > states.index("failing"), states
    assert r["state_after_watch"] == "fixing", r["statuses"]
    assert r["results_before_shutdown"] == 0, r["results"]  # the fix's frognano/result is minutes away
    # Meanwhile the server answers eglot's code actions at once (no verified fix yet), and Emacs
    # is not frozen: a 0.1 s timer kept firing while it sat idle.
    assert r["actions_during_fix_s"] < ANSWER_S, r["actions_during_fix_s"]
    assert all(not a["hasEdit"] for a in r["actions_during_fix"]), r["actions_during_fix"]
    assert r["ticks"] >= 20 and r["max_tick_gap_s"] < 0.5, (r["ticks"], r["max_tick_gap_s"])

    # eglot 1.9 announces no window.workDoneProgress: the server creates no progress token
    # (progress.begin) and sends no $/progress; the status bar ("fixing") is its progress.
    if not (r["initialize"]["window"] or {}).get("workDoneProgress"):
        assert "window/workDoneProgress/create" not in [q["method"] for q in r["requests"]], r["requests"]
        assert r["progress"] == [], r["progress"]

    # Shut down with the fix running: the server stops the job on `shutdown` (its result says
    # cancelled) and is gone within eglot's 5 s (eglot 1.9's jsonrpc deletes the process right
    # after `exit`, so its exit code is SIGKILL's); none of its test runs is left behind.
    assert r["shutdown_s"] < 6 and r["server_exit"]["live"] is False, (r["shutdown_s"], r["server_exit"])
    assert [x["result"]["status"] for x in r["results"]] == ["cancelled"], r["results"]
    assert (r["statuses"][-1]["state"], r["statuses"][-1]["message"]) == ("failing", "fix cancelled"), r["statuses"]
    assert leftover_processes(tmp_path) == [], leftover_processes(tmp_path)
