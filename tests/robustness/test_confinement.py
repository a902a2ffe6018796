"""Code FrogNano runs is confined (docs/ARCHITECTURE.md, invariant 7): the OS sandbox and process lifetimes.

Every test process that runs candidate or model code is confined by Landlock (Linux): it writes
only in the shadow copy, its run dir and its temp dir; TCP bind and connect are denied (the rest,
metadata, other processes, UDP, raw sockets and the environment: test_confinement_more.py).  No
process a test starts outlives its run, not even a daemon in a new session, and the whole run
dies with FrogNano, even by ``kill -9``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import frognano
import frognano.sandbox.runner as runner_module
from frognano.config import load_settings
from frognano.repair.engine import Engine
from frognano.sandbox._worker import frognano_confine
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.workspace import Workspace

from ..conftest import write_project

CONFINED, WHY_NOT = frognano_confine.probe()
landlock = pytest.mark.skipif(not CONFINED.startswith("landlock"), reason=f"no Landlock here: {WHY_NOT}")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc are Linux")


def _run(root: Path, config: RunnerConfig | None = None, edit: dict[str, str] | None = None, **kw):
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, config or RunnerConfig()) as runner:
            if edit is None:
                return runner.run(**kw), runner
            with ws.edited(edit):
                return runner.run(**kw), runner


def _gone(pid: int) -> bool:
    """The process is gone, or a zombie nobody reaped yet (it runs no more code)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between open and read
        return True


def _kill(pids: list[int]) -> None:
    """Clean up after a failed case: the processes it found alive."""
    for pid in pids:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if not _gone(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


# -- writes -------------------------------------------------------------------------------------

@landlock
@pytest.mark.parametrize("warm", [True, False])
def test_candidate_that_writes_outside_gets_permission_error(make_project, outside, warm):
    precious = outside.sentinel / "precious.txt"
    root = make_project({
        "pkg/__init__.py": "",
        "pkg/core.py": "def save(text):\n    return len(text)\n",
        "tests/test_core.py": "from pkg.core import save\n\ndef test_save():\n    assert save('abc') == 3\n",
    })
    outside.watch(root)
    # What a bad candidate (or a model's edit) could do: overwrite, create, remove, rename.
    evil = textwrap.dedent(f"""
        import os, shutil
        def save(text):
            errors = []
            for attempt in (lambda: open({str(precious)!r}, "w").write("pwned"),
                            lambda: open({str(outside.sentinel / "new.txt")!r}, "x"),
                            lambda: os.remove({str(precious)!r}),
                            lambda: os.rename({str(precious)!r}, "stolen.txt"),
                            lambda: shutil.rmtree({str(outside.sentinel)!r})):
                try:
                    attempt()
                except OSError as exc:  # EACCES (Landlock) or EROFS (the read-only mount namespace)
                    errors.append(exc)
            if len(errors) == 5:
                raise errors[0]
            return len(text)
    """)
    run, runner = _run(root, RunnerConfig(warm=warm), edit={"pkg/core.py": evil})
    result = run.tests["tests/test_core.py::test_save"]
    assert result.outcome == "failed"
    assert ("PermissionError" in result.message or "Read-only file system" in result.message), result.message
    assert str(precious) in result.message
    assert run.confinement and run.confinement.startswith("landlock")
    outside.check()  # precious.txt byte-identical, nothing new beside it


@landlock
def test_tests_write_in_the_shadow_and_tmp_path_and_dev_null(make_project, outside):
    root = make_project({"tests/test_io.py": """
        import multiprocessing, os, subprocess, tempfile

        def test_shadow_and_tmp(tmp_path):
            open("out.txt", "w").write("in the shadow")
            (tmp_path / "t.txt").write_text("in pytest's tmp_path")
            with tempfile.NamedTemporaryFile("w") as fh:
                fh.write("in TMPDIR")
            assert os.environ["TMPDIR"] in str(tmp_path)
            subprocess.run("echo hi > /dev/null && echo ok > sub.txt", shell=True, check=True)

        def test_multiprocessing_lock():  # POSIX semaphores live in /dev/shm
            lock = multiprocessing.Lock()
            with lock:
                pass
    """})
    outside.watch(root)
    run, _ = _run(root)
    assert [t.outcome for t in run.tests.values()] == ["passed", "passed"], run.tests


@landlock
def test_baseline_write_outside_is_reported_once_naming_path_and_setting(tmp_path, monkeypatch):
    home = tmp_path / "home"
    cache = home / ".cache" / "tool"
    cache.mkdir(parents=True)
    root = write_project(tmp_path / "proj", {
        "calc.py": "def inc(x):\n    return x + 2\n",
        "tests/test_calc.py": f"""
            from calc import inc

            def test_inc():
                assert inc(1) == 2

            def test_cache():
                with open({str(cache / "data.json")!r}, "w") as fh:
                    fh.write("{{}}")

            def test_cache_wrapped():  # the library swallows the error and says something else
                try:
                    open({str(cache / "other.json")!r}, "w").close()
                except OSError:
                    raise RuntimeError("cache unavailable") from None
        """,
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        report = engine.fix()
    # The cache tests fail before any edit too, and can never pass confined: the fix of inc
    # leaves them out (a note says so) instead of failing for want of them.
    assert report.status == "fixed", report.message
    assert report.failing == ["tests/test_calc.py::test_inc"]
    (left_out,) = [n for n in report.notes if n.startswith("the fix leaves out")]
    assert "tests/test_calc.py::test_cache" in left_out and "1 more" in left_out
    notes = [n for n in report.notes if "sandbox_writable" in n]
    assert len(notes) == 1, report.notes
    assert str(cache / "data.json") in notes[0] and str(cache / "other.json") in notes[0]
    assert "sandbox_writable" in notes[0] and json.dumps([str(cache)]) in notes[0]
    assert not (cache / "data.json").exists()


@landlock
def test_sandbox_writable_lets_a_path_through(tmp_path):
    cache = tmp_path / "home" / ".cache" / "tool"
    cache.mkdir(parents=True)
    root = write_project(tmp_path / "proj", {
        "tests/test_cache.py": f"""
            def test_cache():
                with open({str(cache / "data.json")!r}, "w") as fh:
                    fh.write("{{}}")
        """,
        "pyproject.toml": f"""
            [tool.frognano]
            sandbox_writable = [{json.dumps(str(cache))}]
        """,
    })
    settings = load_settings(root, environ={})
    assert settings.sandbox_writable == [str(cache)]
    run, runner = _run(root, RunnerConfig.from_settings(settings))
    assert run.tests["tests/test_cache.py::test_cache"].outcome == "passed"
    assert (cache / "data.json").read_text() == "{}"
    assert runner.denial_note(run) is None


# -- network ------------------------------------------------------------------------------------

@landlock
def test_a_test_that_starts_a_local_server_is_named_with_the_setting(tmp_path):
    """The sandbox refuses the bind (PermissionError in socketserver's server_bind): the report
    names the test and the setting, where it used to say only that no edit passed."""
    root = write_project(tmp_path / "proj", {
        "srv.py": """
            import socketserver

            def start():
                return socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler).server_address[1]
        """,
        "tests/test_srv.py": """
            from srv import start

            def test_server():
                assert start() > 0
        """,
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        report = engine.fix()
    assert report.failing == ["tests/test_srv.py::test_server"]
    (note,) = [n for n in report.notes if "refused" in n]
    assert note.startswith("tests/test_srv.py::test_server failed on a call the sandbox refused (PermissionError)")
    assert 'sandbox = "off"' in note and "no network" in note


@landlock
def test_tests_failing_on_a_refused_bind_are_left_out_of_a_fix_of_the_others(tmp_path):
    """A real bug beside a test that fails only because the sandbox refuses its server: the fix
    targets the real failure (it used to need the server test to pass too, so nothing could)."""
    root = write_project(tmp_path / "proj", {
        "srv.py": """
            import socketserver

            def start():
                return socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler).server_address[1]

            def port_range(lo, hi):
                return list(range(lo, hi))
        """,
        "tests/test_srv.py": """
            from srv import port_range, start

            def test_server():
                assert start() > 0

            def test_range_includes_hi():
                assert port_range(1, 3) == [1, 2, 3]

            def test_range_single():
                assert port_range(4, 4) == [4]
        """,
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        report = engine.fix()
    assert report.status == "fixed", report.message
    assert report.failing == ["tests/test_srv.py::test_range_includes_hi", "tests/test_srv.py::test_range_single"]
    assert "tests/test_srv.py::test_server" not in report.fix.verified.fail_to_pass
    (left_out,) = [n for n in report.notes if n.startswith("the fix leaves out")]
    assert "tests/test_srv.py::test_server" in left_out


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    yield server
    server.close()


@landlock
@pytest.mark.parametrize("warm", [True, False])
def test_connect_to_a_local_listener_is_refused(make_project, listener, warm):
    port = listener.getsockname()[1]
    root = make_project({"tests/test_net.py": f"""
        import socket

        def test_connect():
            with socket.create_connection(("127.0.0.1", {port}), timeout=5) as conn:
                conn.sendall(b"secrets")
    """})
    run, _ = _run(root, RunnerConfig(warm=warm))
    result = run.tests["tests/test_net.py::test_connect"]
    assert result.outcome == "failed" and "PermissionError" in result.message
    with pytest.raises(socket.timeout):
        listener.accept()  # nothing ever arrived


@landlock
def test_bind_and_listen_are_refused(make_project):
    root = make_project({"tests/test_net.py": """
        import socket

        def test_listen():
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen()

        def test_udp_is_covered():  # Landlock has no UDP rights: the network namespace or seccomp
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.sendto(b"out", ("127.0.0.1", 9))
    """})
    run, _ = _run(root)
    listen = run.tests["tests/test_net.py::test_listen"]
    assert listen.outcome == "failed" and "PermissionError" in listen.message
    udp = run.tests["tests/test_net.py::test_udp_is_covered"]
    assert udp.outcome == "failed" and ("Network is unreachable" in udp.message or "PermissionError" in udp.message)


# -- the project's own tests --------------------------------------------------------------------

@landlock
def test_example_project_passes_the_same_confined_and_fixes(example):
    project = example("calc")
    confined, runner = _run(project, RunnerConfig(sandbox="required"))
    assert runner.confinement.startswith("landlock") and confined.confinement == runner.confinement
    unconfined, _ = _run(project, RunnerConfig(sandbox="off"))
    assert unconfined.confinement == ""
    outcomes = {n: t.outcome for n, t in confined.tests.items()}
    assert outcomes == {n: t.outcome for n, t in unconfined.tests.items()}
    assert "passed" in outcomes.values() and "failed" in outcomes.values()
    with Workspace(project) as ws, Engine(ws, load_settings(project, environ={})) as engine:
        report = engine.fix()
    assert report.status == "fixed" and not [n for n in report.notes if "sandbox" in n]


# -- the settings -------------------------------------------------------------------------------

def _no_sandbox(monkeypatch, why: str = "no OS sandbox in this test") -> None:
    monkeypatch.setattr(runner_module, "probe_sandbox", lambda: ("", why))


def test_required_refuses_to_run_unconfined(example, monkeypatch, outside):
    from click.testing import CliRunner

    from frognano.cli.main import main

    _no_sandbox(monkeypatch)
    project = example("calc")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '\n[tool.frognano]\nsandbox = "required"\n')
    outside.watch(project)
    result = CliRunner().invoke(main, ["fix", str(project), "--json"])
    assert result.exit_code == 2, result.output
    out = json.loads(result.output)
    assert out["status"] == "error"
    assert 'sandbox = "required"' in out["message"] and "no OS sandbox in this test" in out["message"]


def test_bad_sandbox_settings_name_the_key(tmp_path):
    from frognano.errors import UsageError

    root = write_project(tmp_path / "proj", {"pyproject.toml": '[tool.frognano]\nsandbox = "sometimes"\n'})
    with pytest.raises(UsageError, match="sandbox must be one of auto, required, off"):
        load_settings(root, environ={})
    (root / "pyproject.toml").write_text("")
    with pytest.raises(UsageError, match="not an absolute path"):
        load_settings(root, environ={"FROGNANO_SANDBOX_WRITABLE": "relative/dir"})
    settings = load_settings(root, environ={"FROGNANO_SANDBOX": "off", "FROGNANO_SANDBOX_WRITABLE": "~/a /b"})
    assert RunnerConfig.from_settings(settings).sandbox == "off"
    assert RunnerConfig.from_settings(settings).sandbox_writable == ["~/a", "/b"]


def test_auto_runs_unconfined_and_says_so_once(make_project, monkeypatch, caplog, tmp_path):
    _no_sandbox(monkeypatch, "simulated kernel without Landlock")
    monkeypatch.setattr(runner_module, "_warned_unconfined", set())
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    root = make_project({"tests/test_w.py": f"""
        def test_write():
            open({str(scratch / "x.txt")!r}, "w").write("unconfined")
    """})
    with caplog.at_level("WARNING", logger="frognano"):
        first, runner = _run(root)
        second, _ = _run(root)
    said = [r.getMessage() for r in caplog.records if "unconfined" in r.getMessage()]
    assert said == ["tests run unconfined (no OS sandbox): simulated kernel without Landlock"]
    assert first.confinement == second.confinement == "" and runner.unconfined
    assert first.tests["tests/test_w.py::test_write"].outcome == "passed"


def test_off_runs_unconfined(make_project, tmp_path, caplog):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    root = make_project({"tests/test_w.py": f"""
        import socket

        def test_write_and_listen():
            open({str(scratch / "x.txt")!r}, "w").write("unconfined")
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen()
            server.close()
    """})
    with caplog.at_level("WARNING", logger="frognano"):
        run, runner = _run(root, RunnerConfig(sandbox="off"))
    assert run.tests["tests/test_w.py::test_write_and_listen"].outcome == "passed"
    assert run.confinement == "" and runner.unconfined == 'sandbox = "off"'
    assert (scratch / "x.txt").read_text() == "unconfined"
    assert not [r for r in caplog.records if "unconfined" in r.getMessage()]  # asked for: not warned


# -- process lifetimes --------------------------------------------------------------------------

DAEMON = r"""
    import os, signal, subprocess, sys, time

    DAEMON = ("import os, sys, time\n"
              "if os.fork():\n"
              "    os._exit(0)\n"
              "os.setsid()\n"
              "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
              "time.sleep(300)\n")

    def _daemon(name):
        path = os.path.abspath(name)
        subprocess.run([sys.executable, "-c", DAEMON, path], check=True)
        while not os.path.exists(path) or not open(path).read():
            time.sleep(0.01)
        subprocess.Popen(["sleep", "300"], start_new_session=True)  # and a plain new session

    def test_leaves_a_daemon():
        _daemon("daemon.pid")

    def test_daemon_then_hangs():  # deaf to the in-process alarm: FrogNano's watchdog kills it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        _daemon("hanging-daemon.pid")
        while True:
            time.sleep(0.01)
"""


@linux
@pytest.mark.parametrize("warm", [True, False])
def test_daemons_in_new_sessions_do_not_outlive_the_run(make_project, warm):
    root = make_project({"tests/test_daemon.py": DAEMON})
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(warm=warm, timeout=2.0)) as runner:
            before = set(frognano_confine.descendants(os.getpid()))
            run = runner.run()
            assert run.tests["tests/test_daemon.py::test_leaves_a_daemon"].outcome == "passed"
            assert run.tests["tests/test_daemon.py::test_daemon_then_hangs"].outcome == "timeout"
            daemons = [int((ws.shadow / name).read_text()) for name in ("daemon.pid", "hanging-daemon.pid")]
            # while the runner (and its warm server) lives on, nothing of the run is left
            alive = _wait_gone(daemons, 5.0)
            _kill(alive)
            assert alive == [], "a daemon a test started outlived its run"
            stray = set(frognano_confine.descendants(os.getpid())) - before
            server = {runner._server.pid} if runner._server is not None else set()
            stray = [p for p in stray - server if not _gone(p)]
            _kill(stray)
            assert stray == []


CONTROLLER = """
import sys
from pathlib import Path
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.workspace import Workspace

with Workspace(Path(sys.argv[1])) as ws:
    ws.sync()
    print(ws.shadow, flush=True)
    with TestRunner(ws, RunnerConfig(warm=sys.argv[2] == "warm", timeout=120)) as runner:
        runner.run()
"""

STUBBORN = """
    import os, signal, subprocess, sys

    def test_spins_with_sigalrm_blocked():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open("pids.txt.tmp", "w") as fh:
            fh.write(f"{os.getpid()} {os.getppid()} {child.pid} {os.environ['TMPDIR']}")
        os.rename("pids.txt.tmp", "pids.txt")
        while True:
            pass
"""


@linux
@pytest.mark.parametrize("mode", ["warm", "fresh"])
def test_run_dies_with_frognano_even_by_kill_9(make_project, mode, tmp_path):
    root = make_project({"tests/test_stubborn.py": STUBBORN})
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER)
    here = str(Path(frognano.__file__).resolve().parents[1])  # this FrogNano, not an installed one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    controller = subprocess.Popen([sys.executable, str(script), str(root), mode], stdout=subprocess.PIPE,
                                  text=True, env=env)
    pids: list[int] = []
    tmp = ""
    try:
        shadow = Path(controller.stdout.readline().strip())  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while not (shadow / "pids.txt").exists():
            assert time.monotonic() < deadline and controller.poll() is None, "the test never started"
            time.sleep(0.05)
        *numbers, tmp = (shadow / "pids.txt").read_text().split()
        pids = [int(p) for p in numbers]
        test, parent, sleeper = pids
        assert not _gone(test) and not _gone(parent) and not _gone(sleeper)
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait()
        # the fork server (or the fresh run's supervisor), the spinning test, its new-session child
        assert _wait_gone([parent, test, sleeper]) == []
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        _kill(pids)
        if tmp.startswith(tempfile.gettempdir()):  # the run's temp dir, which a killed FrogNano leaves
            shutil.rmtree(tmp, ignore_errors=True)
