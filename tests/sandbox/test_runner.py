"""The test runner, warm and fresh: structured results, limits, crashes, and never stale code."""

import logging
import sys
import time

import pytest

from frognano.sandbox.runner import RunnerConfig, TestRunner, _Options
from frognano.sandbox.workspace import Workspace

STALE_PROJECT = {
    "pkg/__init__.py": "",
    "pkg/core.py": """
        def is_adult(age):
            return age > 18
    """,
    "pkg/helpers.py": """
        FACTOR = 2
    """,
    "conftest.py": """
        import pytest
        from pkg.helpers import FACTOR

        @pytest.fixture
        def factor():
            return FACTOR
    """,
    "tests/test_core.py": """
        from pkg.core import is_adult

        def test_adult():
            assert is_adult(18)

        def test_child():
            assert not is_adult(17)

        def test_factor(factor):
            assert factor == 2
    """,
}

FIX = {"pkg/core.py": "def is_adult(age):\n    return age >= 18\n"}
WRONG = {"pkg/core.py": "def is_adult(age):\n    return age < 18\n"}  # same size as the original
CONFTEST_DEP = {"pkg/helpers.py": "FACTOR = 3\n"}


def outcomes(run):
    return {n: t.outcome for n, t in sorted(run.tests.items())}


@pytest.fixture
def workspace(make_project):
    with Workspace(make_project(STALE_PROJECT)) as ws:
        ws.sync()
        yield ws


def run_sequence(ws, warm):
    """Candidates back to back, each edit reverted before the next, as the search does."""
    seq = [None, FIX, WRONG, FIX, CONFTEST_DEP, None, WRONG, CONFTEST_DEP, FIX]
    results = []
    with TestRunner(ws, RunnerConfig(warm=warm)) as runner:
        for edit in seq:
            if edit is None:
                results.append(outcomes(runner.run()))
            else:
                with ws.edited(edit):
                    results.append(outcomes(runner.run()))
        assert runner.warm is warm
    return results


def test_warm_runner_never_validates_stale_code(workspace):
    warm = run_sequence(workspace, warm=True)
    fresh = run_sequence(workspace, warm=False)
    assert warm == fresh
    original, fixed, wrong, _, dep = warm[:5]
    assert original["tests/test_core.py::test_adult"] == "failed"
    assert fixed["tests/test_core.py::test_adult"] == "passed"
    assert wrong["tests/test_core.py::test_child"] == "failed"
    assert dep["tests/test_core.py::test_factor"] == "failed"
    assert warm[5] == original


def test_structured_results_and_coverage(workspace):
    with TestRunner(workspace) as runner:
        run = runner.run(coverage=True)
    t = run.tests["tests/test_core.py::test_adult"]
    assert t.outcome == "failed"
    assert "assert False" in t.message
    assert t.frames[-1].path == "tests/test_core.py" and t.frames[-1].line == 4
    assert t.coverage["pkg/core.py"] == [2]
    assert t.last == ("pkg/core.py", 2)
    assert run.collected == sorted(run.collected, key=run.collected.index)
    assert len(run.collected) == 3 and run.leaks == []


@pytest.mark.parametrize("warm", [True, False])
def test_hangs_crashes_and_output_are_contained(make_project, warm):
    root = make_project({
        "tests/test_bad.py": """
            import os, signal, time

            def test_first():
                pass

            def test_hang():
                time.sleep(60)

            def test_hang_in_c():
                # SIGALRM blocked: the in-process timer cannot fire, the watchdog must kill.
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
                time.sleep(60)

            def test_suicide():
                os.kill(os.getpid(), signal.SIGKILL)

            def test_exit():
                os._exit(3)

            def test_noisy():
                print("x" * 1_000_000)
                assert False

            def test_memory():
                b = bytearray(64 * 1024 ** 3)

            def test_last():
                pass
        """,
    })
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=1.0, warm=warm, max_output=500, memory_mb=512)) as runner:
            run = runner.run()
    got = outcomes(run)
    prefix = "tests/test_bad.py::"
    assert got == {
        prefix + "test_exit": "crashed",
        prefix + "test_first": "passed",
        prefix + "test_hang": "timeout",
        prefix + "test_hang_in_c": "timeout",
        prefix + "test_last": "passed",
        prefix + "test_memory": "failed",
        prefix + "test_noisy": "failed",
        prefix + "test_suicide": "crashed",
    }
    assert "MemoryError" in run.tests[prefix + "test_memory"].message
    assert len(run.tests[prefix + "test_noisy"].stdout) <= 510
    assert "SIGKILL" in run.tests[prefix + "test_suicide"].message


@pytest.mark.parametrize("warm", [True, False])
def test_a_deadline_kills_the_run_in_flight_and_relaunches_nothing(make_project, warm):
    """The search's end bounds a candidate's run: a test that would hang for a minute (its own
    limit 30 s) is killed at the deadline, the tests after it are not started, and the result
    is marked cancelled (no verdict), not a timeout of the test."""
    root = make_project({
        "tests/test_slow.py": """
            import time

            def test_hang():
                time.sleep(60)

            def test_after():
                pass
        """,
    })
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=30.0, warm=warm)) as runner:
            runner.run(["tests/test_slow.py::test_after"])  # the warm session starts outside the deadline
            runner.deadline = time.monotonic() + 3.0
            started = time.monotonic()
            run = runner.run(["tests/test_slow.py::test_hang", "tests/test_slow.py::test_after"])
            took = time.monotonic() - started
    assert run.cancelled
    assert "tests/test_slow.py::test_after" not in run.tests
    assert took < 15.0  # not the 30 s limit, not a relaunch


def test_a_run_killed_before_any_test_starts_is_not_relaunched(make_project):
    """Collection that outlives collect_timeout is one collection error, not 25 relaunches of
    the same (each another collect_timeout)."""
    root = make_project({
        "tests/test_slow_import.py": """
            import time
            time.sleep(30)

            def test_a():
                pass
        """,
    })
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(warm=False, collect_timeout=1.5)) as runner:
            started = time.monotonic()
            run = runner.run(["tests/test_slow_import.py::test_a"])
            took = time.monotonic() - started
    assert not run.tests
    assert len(run.collect_errors) == 1 and "was killed" in run.collect_errors[0].summary
    assert took < 12.0


def test_collection_errors_are_their_own_kind(make_project):
    root = make_project({
        "mod.py": "def f(:\n    pass\n",
        "tests/test_a.py": "from mod import f\n\ndef test_a():\n    pass\n",
        "tests/test_b.py": "def test_b():\n    pass\n",
    })
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws) as runner:
            run = runner.run()
    assert [e.nodeid for e in run.collect_errors] == ["tests/test_a.py"]
    assert "SyntaxError" in run.collect_errors[0].summary
    assert outcomes(run) == {"tests/test_b.py::test_b": "passed"}


def test_a_run_selects_node_ids_and_passes_arguments(workspace):
    with TestRunner(workspace) as runner:
        one = runner.run(["tests/test_core.py::test_child"])
        by_k = runner.run(args=["-k", "factor"])
    assert list(one.tests) == ["tests/test_core.py::test_child"]
    assert list(by_k.tests) == ["tests/test_core.py::test_factor"]


def test_a_dependency_that_imports_the_project_is_left_out_and_the_rest_stays_warm(make_project, monkeypatch,
                                                                                    caplog):
    # A "third-party" module that imports the project (a plugin of it, a tool in a development
    # venv): pre-imported, a forked child would see the real project's code, not the shadow's.
    # Only that module is left out of the pre-import; the server stays warm.
    # Both kinds: a dependency the tests import, and a pytest plugin (a pytest11 entry point,
    # loaded by every pytest run) that imports the project.
    site = make_project({
        "sneaky.py": "import pkg.core\n",
        "projplugin.py": "import pkg.helpers\n\ndef pytest_report_header(config):\n    return 'projplugin'\n",
        "projplugin-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: projplugin\nVersion: 1.0\n",
        "projplugin-1.0.dist-info/entry_points.txt": "[pytest11]\nprojplugin = projplugin\n",
    }, name="site")
    files = dict(STALE_PROJECT)
    files["tests/test_sneaky.py"] = "import sneaky\n\ndef test_s():\n    pass\n"
    root = make_project(files)
    # The project on the path too, as an editable install would put it.
    monkeypatch.setenv("PYTHONPATH", f"{site}:{root}")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)  # installed plugins load
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws) as runner, caplog.at_level(logging.INFO, logger="frognano.sandbox.forkserver"):
            run = runner.run()
            assert runner.warm, runner.warm_reason
            assert "sneaky (pkg, pkg.core)" in caplog.text and "projplugin (pkg, pkg.helpers)" in caplog.text
            with ws.edited(FIX):  # the shadow's code is what the tests run, warm and swapped
                fixed = runner.run(["tests/test_core.py::test_adult", "tests/test_sneaky.py::test_s"])
    assert run.tests["tests/test_sneaky.py::test_s"].outcome == "passed"
    assert run.tests["tests/test_core.py::test_adult"].outcome == "failed"
    assert fixed.tests["tests/test_core.py::test_adult"].outcome == "passed" and not fixed.leaks


@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
def test_pytests_plugin_variables_reach_the_tests_as_from_the_users_shell(make_project, monkeypatch, fresh):
    """PYTEST_DISABLE_PLUGIN_AUTOLOAD and PYTEST_PLUGINS say which plugins pytest loads: an
    installed plugin (a pytest11 entry point) that gives the tests a fixture loads by default,
    not with the first, and again when the second names it; warm and fresh alike."""
    site = make_project({
        "magicplugin.py": "import pytest\n\n@pytest.fixture\ndef magic():\n    return 42\n",
        "magicplugin-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: magicplugin\nVersion: 1.0\n",
        "magicplugin-1.0.dist-info/entry_points.txt": "[pytest11]\nmagicplugin = magicplugin\n",
    }, name="site")
    root = make_project({"tests/test_m.py": "def test_m(magic):\n    assert magic == 42\n"})
    monkeypatch.setenv("PYTHONPATH", str(site))
    test = "tests/test_m.py::test_m"

    def outcome() -> str:
        with Workspace(root) as ws:
            ws.sync()
            with TestRunner(ws) as runner:
                return runner.run([test], fresh=fresh).tests[test].outcome

    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    assert outcome() == "passed"
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert outcome() == "error"  # fixture 'magic' not found
    monkeypatch.setenv("PYTEST_PLUGINS", "magicplugin")
    assert outcome() == "passed"


def test_missing_interpreter_is_a_usage_error(workspace):
    from frognano.errors import UsageError

    with pytest.raises(UsageError, match="no such interpreter"):
        TestRunner(workspace, RunnerConfig(python="/nonexistent/python3"))


def test_interpreter_without_pytest(workspace, tmp_path):
    import subprocess

    from frognano.errors import ProjectError

    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    with TestRunner(workspace, RunnerConfig(python=str(venv / "bin" / "python"))) as runner:
        with pytest.raises(ProjectError, match="pytest is not installed"):
            runner.run()


def test_limits_kill_the_process_group_and_bound_files(make_project, tmp_path):
    (tmp_path / "out").mkdir()
    marker = tmp_path / "out" / "grandchild.pid"  # outside the shadow: made writable below
    root = make_project({
        "tests/test_limits.py": f"""
            import subprocess, time

            def test_spawns_and_hangs():
                child = subprocess.Popen(["sleep", "300"])
                open({str(marker)!r}, "w").write(str(child.pid))
                while True:  # a busy loop in C would do too; the watchdog kills the whole group
                    time.sleep(0.01)

            def test_big_file(tmp_path):
                with open(tmp_path / "big", "wb") as fh:
                    fh.write(b"x" * (3 * 1024 * 1024))
        """,
    })
    with Workspace(root) as ws:
        ws.sync()
        config = RunnerConfig(timeout=1.0, fsize_mb=1, sandbox_writable=[str(marker.parent)])
        with TestRunner(ws, config) as runner:
            run = runner.run()
    assert run.tests["tests/test_limits.py::test_spawns_and_hangs"].outcome == "timeout"
    big = run.tests["tests/test_limits.py::test_big_file"]
    assert big.outcome == "failed" and "File too large" in big.message
    import os
    import time

    pid = int(marker.read_text())
    for _ in range(50):  # the grandchild is gone once its group was killed and it was reaped
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the test's own child process outlived the run")


def test_replies_that_arrive_together_are_both_read(workspace):
    """A quick run's two replies (its pid, then its end) can both sit in the pipe before the
    controller reads (a busy controller: another thread holding the GIL).  The second must still
    be read: a buffered readline would hold it where select() never looks, and wait forever."""
    import time

    nodeid = "tests/test_core.py::test_child"
    with TestRunner(workspace) as runner:
        assert runner.run([nodeid]).tests[nodeid].passed and runner.warm
        runner._send(runner._request([nodeid], (), _Options(), {}))
        time.sleep(1.5)  # the run ends meanwhile: both replies are in the pipe
        pid = runner._receive(10.0)["pid"]
        done = runner._receive(10.0)
        assert done["pid"] == pid and done["returncode"] == 0
        assert runner.run([nodeid]).tests[nodeid].passed  # and the server goes on serving


@pytest.mark.parametrize("warm", [True, False])
def test_an_installed_copy_of_the_project_never_stands_in_for_it(make_project, tmp_path, monkeypatch, warm):
    """A dependency (pre-imported by the warm server) that imports the project's own package
    from site-packages, as a plugin importing more_itertools does while you work on it."""
    site = tmp_path / "site"
    (site / "mylib").mkdir(parents=True)
    (site / "mylib" / "__init__.py").write_text('VALUE = "installed"\n')
    (site / "vendored_dep.py").write_text("import mylib\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    root = make_project({
        "mylib/__init__.py": 'VALUE = "project"\n',
        "tests/test_value.py": """
            import vendored_dep
            import mylib

            def test_value():
                assert mylib.VALUE == "project"
        """,
    })
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(warm=warm)) as runner:
            run = runner.run()
            assert runner.warm is warm
    assert run.tests["tests/test_value.py::test_value"].outcome == "passed", run.tests
