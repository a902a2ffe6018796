"""Paths the user gives stay confined (issue 25 row 12) and flaky tests never reach a task's
PASS_TO_PASS (row 13).

Row 12: ``eval --repos`` resolves a row's ``repo`` only inside the given folders (an absolute,
``../..`` or ``~`` row that leads elsewhere is refused for that row, the others go on);
``fix ~``, ``fix /`` and an unmarked tree over the size limit end with one line and exit 2; the
language server shows the same line for a workspace folder ``/``.  Everything runs through the
real CLI and the real server; a conftest.py planted where FrogNano must not go writes a marker
into whatever copy of it runs, and the cache is searched for that marker and the dotfile.

Row 13: a test that fails on every third run (a counter outside the shadow, so the outcome
sequence is fixed: its baseline and reversed runs pass) is synthesised over: it must never be
in a task's PASS_TO_PASS (nor FAIL_TO_PASS), and the run says it was dropped as flaky.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frognano.sandbox.runner import RunnerConfig
from frognano.synthesis.store import read_tasks
from frognano.synthesis.synth import synthesize

from ..conftest import EXAMPLES, write_project

MARKER = "CONFTEST_RAN"
DOTFILE = ".my-secret-dotfile"
# A conftest that would reveal that FrogNano ran a folder it was never given: it writes a
# marker next to itself, i.e. into the shadow copy inside the cache, where the test looks.
PLANTED_CONFTEST = f"""
    from pathlib import Path
    (Path(__file__).parent / {MARKER!r}).write_text("ran\\n")
"""
PLANTED_TEST = "def test_ok():\n    assert True\n"


def _env(tmp_path: Path, home: Path, **more: str) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home), "FROGNANO_CACHE_DIR": str(tmp_path / "cache"),
           "FROGNANO_MAX_CANDIDATES": "0", "FROGNANO_MAX_PAIRS": "0", "FROGNANO_EPISODES": "1", **more}
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _frognano(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], check=False, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _found(folder: Path, name: str) -> list[Path]:
    return [p for p in folder.rglob(name)] if folder.exists() else []


def _home(tmp_path: Path) -> Path:
    """A home folder holding a dotfile and a conftest.py that must never run."""
    return write_project(tmp_path / "home", {DOTFILE: "token = hunter2\n", "conftest.py": PLANTED_CONFTEST,
                                             "test_home.py": PLANTED_TEST})


def _row(instance_id: str, repo: str) -> dict:
    return {"instance_id": instance_id, "repo": repo, "base_commit": "", "patch": "",
            "FAIL_TO_PASS": ["tests/test_stats.py::test_mean"], "PASS_TO_PASS": []}


# -- row 12: eval --repos ---------------------------------------------------------------------------

def test_eval_repos_refuses_rows_that_lead_outside_the_folders(tmp_path):
    home = _home(tmp_path)
    # ``../..`` from the working directory below: a project outside the --repos folder.
    nest = write_project(tmp_path / "nest", {"conftest.py": PLANTED_CONFTEST, "test_nest.py": PLANTED_TEST})
    cwd = nest / "a" / "b"
    cwd.mkdir(parents=True)
    victim = write_project(tmp_path / "victim", {"pyproject.toml": "[project]\nname = 'victim'\n",
                                                 "conftest.py": PLANTED_CONFTEST, "test_v.py": PLANTED_TEST})
    repos = tmp_path / "repos"
    repos.mkdir()
    (repos / "escape").symlink_to(victim)  # a name inside the folder that resolves outside it
    tasks = tmp_path / "tasks.jsonl"
    rows = [_row("home", "~"), _row("updown", "../.."), _row("absolute", str(victim)),
            _row("symlink", "escape")]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = _frognano(["eval", str(tasks), "--repos", str(repos), "--json"], _env(tmp_path, home), cwd)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    errors = {e["instance_id"]: e["error"] for e in out["errors"]}
    assert set(errors) == {"home", "updown", "absolute", "symlink"}, out
    for iid, message in errors.items():
        assert "outside the --repos folders" in message and "\n" not in message, (iid, message)
    cache = tmp_path / "cache"
    assert not _found(cache, MARKER), "a planted conftest.py ran"
    assert not _found(cache, DOTFILE), "the home folder's dotfile was copied into the cache"


def test_eval_repos_still_finds_a_repository_inside_the_folders(tmp_path, calc_green):
    """The confinement refuses escapes, not relocation: an absolute row written on another
    machine is found by its name inside --repos."""
    repos = calc_green.parent
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({**_row("elsewhere", "/some/other/machine/calc"),
                                 "FAIL_TO_PASS": ["tests/test_stats.py::test_mean"]}) + "\n")
    proc = _frognano(["eval", str(tasks), "--repos", str(repos), "--json"], _env(tmp_path, tmp_path / "home"),
                     tmp_path)
    out = json.loads(proc.stdout)
    # Found and laid out: the clean tree's test passes, so the task's bug "does not reproduce",
    # which is a message about the task, not about where its repository is.
    assert [e["error"] for e in out["errors"]] and "outside" not in out["errors"][0]["error"], out
    assert "does not reproduce" in out["errors"][0]["error"], out


@pytest.fixture
def calc_green(tmp_path):
    import shutil

    dest = tmp_path / "repos" / "calc"
    shutil.copytree(EXAMPLES / "calc", dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    stats = dest / "calc" / "stats.py"
    stats.write_text(stats.read_text().replace("age > 18", "age >= 18"))
    return dest


# -- row 12: fix on a folder that is no project ------------------------------------------------------

def _one_line_refusal(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_fix_home_is_refused_in_one_line(tmp_path):
    home = _home(tmp_path)
    for i in range(30):
        (home / f"notes-{i}.txt").write_text("x\n")
    env = _env(tmp_path, home)
    for given in ("~", str(home)):
        _one_line_refusal(_frognano(["fix", given], env, tmp_path), "home folder")
    assert not _found(tmp_path / "cache", DOTFILE) and not _found(tmp_path / "cache", MARKER)


def test_fix_root_is_refused_quickly(tmp_path):
    started = time.monotonic()
    proc = _frognano(["fix", "/"], _env(tmp_path, tmp_path / "home"), tmp_path, timeout=60)
    _one_line_refusal(proc, "/")
    assert time.monotonic() - started < 20


def test_fix_refuses_a_big_tree_without_a_project_marker(tmp_path):
    big = tmp_path / "downloads"
    for i in range(60):
        write_project(big / f"d{i % 6}", {f"f{i}.txt": "data\n"})
    (big / "test_x.py").write_text(PLANTED_TEST)
    env = _env(tmp_path, tmp_path / "home", FROGNANO_SCOPE_MAX_FILES="50")
    line = _one_line_refusal(_frognano(["fix", str(big)], env, tmp_path), "project marker", "50")
    assert "FROGNANO_SCOPE_MAX_FILES" in line
    # The same tree with a marker is a project, whatever its size; and a small unmarked one is fine.
    (big / "pyproject.toml").write_text("[project]\nname = 'big'\n")
    assert _frognano(["fix", str(big), "--json"], env, tmp_path).returncode == 0
    small = write_project(tmp_path / "small", {"test_s.py": PLANTED_TEST})
    assert _frognano(["fix", str(small), "--json"], env, tmp_path).returncode == 0


# -- row 12: the language server's workspace folder ---------------------------------------------------

@pytest.mark.asyncio
async def test_server_workspace_folder_root_is_refused_with_a_message(tmp_path, make_project):
    import asyncio
    import contextlib

    from lsprotocol import types
    from pytest_lsp import client_capabilities

    from ..server.lsp import make_client, open_doc, save, wait_for, wait_state

    project = make_project({"pyproject.toml": "[project]\nname = 'p'\n", "m.py": "def f():\n    return 1\n",
                            "tests/test_m.py": "from m import f\n\ndef test_f():\n    assert f() == 2\n"})
    errfile = tmp_path / "serve.stderr"
    client = make_client()
    await client.start_io("/bin/sh", "-c", f"exec {sys.executable} -m frognano serve 2>{errfile}")
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri="file:///",
            workspace_folders=[types.WorkspaceFolder(uri="file:///", name="/")]))
        await wait_for(lambda: client.statuses, what="the first frognano/status")
        shown = await wait_for(lambda: [m.message for m in client.messages if "/" in m.message
                                        and "not a project" in m.message], what="a showMessage refusing /")
        assert "\n" not in shown[0]
        # The server goes on: a file of a real project is still tested (its own folder).
        open_doc(client, project / "tests/test_m.py")
        save(client, project / "tests/test_m.py")
        st = await wait_state(client, "failing", "error", after=1, timeout=60)
        assert st["state"] == "failing", st
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), 15)
        await client.stop()
    text = errfile.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert not any("internal error" in m.message or "Traceback" in m.message for m in client.log_messages)


# -- row 13: flaky tests in synthesis -----------------------------------------------------------------

def _flaky_project(root: Path, counter: Path) -> Path:
    """Four small functions with their tests, and ``test_flaky``, which fails on every third
    run (1-based) of it anywhere: its baseline and reversed runs pass, the third run fails."""
    return write_project(root, {
        "pyproject.toml": "[project]\nname = 'flaky'\n",
        "calc.py": """
            def add(a, b):
                return a + b


            def sub(a, b):
                return a - b


            def is_adult(age):
                return age >= 18


            def clamp(x, low, high):
                if x < low:
                    return low
                if x > high:
                    return high
                return x
        """,
        "tests/test_calc.py": f"""
            import fcntl
            import os

            from calc import add, clamp, is_adult, sub


            def test_add():
                assert add(2, 3) == 5


            def test_sub():
                assert sub(5, 3) == 2


            def test_is_adult():
                assert is_adult(18) and not is_adult(17)


            def test_clamp():
                assert clamp(5, 0, 3) == 3 and clamp(-1, 0, 3) == 0 and clamp(2, 0, 3) == 2


            def test_flaky():
                # Stands for a test that fails 40% of the time at random, made deterministic:
                # runs are counted in a file outside the shadow copy (every shadow and run sees it).
                with open({str(counter)!r}, "a+") as fh:
                    fcntl.flock(fh, fcntl.LOCK_EX)
                    fh.write("x")
                    fh.flush()
                    runs = os.path.getsize({str(counter)!r})
                assert runs % 3 != 0, f"flaky: run {{runs}}"
        """,
    })


def test_a_flaky_test_never_becomes_pass_to_pass(tmp_path):
    counters = tmp_path / "counters"
    counters.mkdir()
    counter = counters / "flaky.count"
    repo = _flaky_project(tmp_path / "flaky", counter)
    out = tmp_path / "tasks.jsonl"
    summary = synthesize([repo], out, n=4, seed=0,
                         config=RunnerConfig(sandbox_writable=[str(counters)]))
    tasks = list(read_tasks(out))
    assert tasks, dict(summary.skips)
    flaky = "tests/test_calc.py::test_flaky"
    assert counter.stat().st_size >= 3, "the flaky test never ran a third time"
    for task in tasks:
        assert flaky not in task.PASS_TO_PASS, task.instance_id
        assert flaky not in task.FAIL_TO_PASS, task.instance_id
    assert summary.flaky.get(str(repo.resolve())) == [flaky], summary.flaky


def test_reruns_on_a_spare_runner_prove_the_stable_tests_and_catch_the_flaky_one(tmp_path):
    """The set-up's spare-core reruns (``flaky.rerun_while``), on a real runner."""
    import threading

    from frognano.sandbox.runner import TestRunner
    from frognano.sandbox.workspace import Workspace
    from frognano.synthesis.flaky import Stability, rerun_while, runs_needed

    assert runs_needed() == 10 and 0.6 ** runs_needed() <= 0.01 < 0.6 ** (runs_needed() - 1)
    counters = tmp_path / "counters"
    counters.mkdir()
    repo = _flaky_project(tmp_path / "flaky", counters / "flaky.count")
    record = Stability(needed=4)
    with Workspace(repo) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(sandbox_writable=[str(counters)])) as runner:
            tests = sorted(runner.run(None).tests)
            rerun_while(runner, tests, threading.Event(), record)
    assert record.flaky == {"tests/test_calc.py::test_flaky"}
    assert all(record.proven(n) for n in tests if n not in record.flaky)
