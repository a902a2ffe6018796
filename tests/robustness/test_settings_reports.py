"""Settings and reports (docs/ARCHITECTURE.md, invariant 5 and §6): bad settings are exit 2 naming the key, a
conftest that raises is an error naming the project's own file, and huge output is bounded.

Each case runs the real command line (``python -m frognano``) or the real watch loop, on a
project written in the case, under the ``outside`` guard: nothing but FrogNano's cache changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lsprotocol import types

from frognano.config import load_settings
from frognano.errors import UsageError
from tests.conftest import write_project
from tests.server.lsp import open_doc, save, serve, wait_for, wait_state
from tests.cli.test_watch import Watching

GREEN = {
    "pkg/__init__.py": "",
    "pkg/mod.py": """
        def add(a, b):
            return a + b
        """,
    "tests/test_mod.py": """
        from pkg.mod import add

        def test_add():
            assert add(1, 2) == 3
        """,
}
MB = 1 << 20


def frognano(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def measured(*args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float, int]:
    """``frognano ARGS`` with its wall time and the peak RSS (bytes) of it and every process
    under it, from a wrapper whose only children they are."""
    wrapper = textwrap.dedent("""
        import json, resource, subprocess, sys, time
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "frognano", *sys.argv[1:]], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        seconds = time.monotonic() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        print(json.dumps([proc.returncode, proc.stdout, proc.stderr, seconds, peak]))
    """)
    out = subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True,
                         timeout=timeout, env=os.environ.copy(), check=True)
    code, stdout, stderr, seconds, peak = json.loads(out.stdout)
    return subprocess.CompletedProcess(args, code, stdout, stderr), seconds, peak


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def project_with(tmp_path: Path, files: dict[str, str], name: str = "proj") -> Path:
    return write_project(tmp_path / name, {**GREEN, **files})


# -- bad settings: exit 2, naming the key ---------------------------------------------------------

BAD_TOML = {
    "timeout-nan": ("[tool.frognano]\ntimeout = nan\n", "timeout"),
    "timeout-inf": ("[tool.frognano]\ntimeout = inf\n", "timeout"),
    "search_seconds-negative": ("[tool.frognano]\nsearch_seconds = -1\n", "search_seconds"),
    "temperature-nan": ("[tool.frognano]\ntemperature = nan\n", "temperature"),
    "memory_mb-2**70": (f"[tool.frognano]\nmemory_mb = {2**70}\n", "memory_mb"),
    "frognano-not-a-table": ("[tool]\nfrognano = 3\n", "tool.frognano"),
    "tool-not-a-table": ('tool = "x"\n', "tool"),
    "test_args-a-string": ('[tool.frognano]\ntest_args = "-x"\n', "test_args"),
}


@pytest.mark.parametrize("toml,key", list(BAD_TOML.values()), ids=list(BAD_TOML))
def test_bad_pyproject_setting_is_exit_2_naming_the_key(tmp_path, outside, toml, key):
    project = project_with(tmp_path, {"pyproject.toml": toml})
    outside.watch(project)
    proc = frognano("fix", str(project), "--json")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert out["status"] == "error" and out["fix"] is None
    assert key in out["message"] and "pyproject.toml" in out["message"], out["message"]
    assert "Traceback" not in proc.stderr
    human = frognano("fix", str(project))
    assert human.returncode == 2 and key in human.stderr and "Traceback" not in human.stderr, human.stderr
    outside.check()


def test_nan_from_the_environment_is_exit_2_naming_the_variable(tmp_path, outside):
    project = project_with(tmp_path, {})
    outside.watch(project)
    proc = frognano("fix", str(project), "--json", env={"FROGNANO_TIMEOUT": "nan"})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert out["status"] == "error" and "FROGNANO_TIMEOUT" in out["message"], out
    flag = frognano("fix", str(project), "--json", "--timeout", "inf")
    assert flag.returncode == 2 and "timeout" in json.loads(flag.stdout)["message"]
    outside.check()


def test_environment_strings_are_still_split_and_bounds_hold_in_process(tmp_path):
    project = project_with(tmp_path, {})
    settings = load_settings(project, environ={"FROGNANO_TEST_ARGS": "-k 'not slow' -q"})
    assert settings.test_args == ["-k", "not slow", "-q"]
    for name, value in [("timeout", float("nan")), ("collect_timeout", 2 * 86_400.0),
                        ("max_candidates", 10**12), ("temperature", float("inf"))]:
        with pytest.raises(UsageError, match=name):
            load_settings(project, {name: value}, environ={})


@pytest.mark.asyncio
async def test_lsp_bad_setting_is_a_warning_and_that_key_only_falls_back(tmp_path, outside):
    calc = Path(__file__).resolve().parents[2] / "examples" / "calc"
    root = tmp_path / "calc"
    for p in calc.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            (root / p.relative_to(calc)).parent.mkdir(parents=True, exist_ok=True)
            (root / p.relative_to(calc)).write_bytes(p.read_bytes())
    # A NaN in pyproject next to a good key: the good one still applies (only the failing
    # test is deselected, so the suite passes), the bad one warns and keeps its default.
    with open(root / "pyproject.toml", "a") as fh:
        fh.write('\n[tool.frognano]\ntimeout = nan\ntest_args = ["-k", "not is_adult"]\n')
    outside.watch(root)
    async with serve(root, {"debounceMs": 0, "temperature": "nan", "searchSeconds": 1e400}) as client:
        await wait_for(lambda: len([m for m in client.messages if m.type == types.MessageType.Warning]) >= 3,
                       what="three warnings")
        shown = [m.message for m in client.messages if m.type == types.MessageType.Warning]
        for key in ("timeout", "temperature", "searchSeconds"):
            assert any(key in m for m in shown), (key, shown)
        open_doc(client, root / "calc/stats.py")
        save(client, root / "calc/stats.py")
        state = await wait_state(client, "passing")
        assert state["message"].startswith("all ") and state["message"].endswith(" tests pass"), state
    outside.check()


# -- a conftest that raises -------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["conftest.py", "tests/conftest.py", "tests/unit/conftest.py"])
def test_raising_conftest_is_an_error_naming_the_project_file(tmp_path, outside, where):
    files = {where: 'raise RuntimeError("conftest says no")\n'}
    if where.startswith("tests/unit"):
        files["tests/unit/test_unit.py"] = "def test_unit():\n    pass\n"
    project = project_with(tmp_path, files)
    outside.watch(project)
    proc = frognano("fix", str(project), "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert out["status"] == "error", out
    message = out["message"]
    assert str(project / where) in message and "RuntimeError: conftest says no" in message, message
    assert "shadow-" not in message and os.environ["FROGNANO_CACHE_DIR"] not in message, message
    outside.check()


# -- huge output ------------------------------------------------------------------------------------

HUGE = """
    import sys
    from pkg.mod import add

    def test_prints_{mb}_mb():
        line = "x" * 1023 + "\\n"
        for _ in range({mb} * 1024):
            sys.stdout.write(line)
        assert add(1, 2) == 3
    """


@pytest.mark.slow
def test_a_passing_test_printing_300_mb_passes_in_bounded_memory_and_disk(tmp_path, outside, _private_cache):
    project = project_with(tmp_path, {"tests/test_huge.py": HUGE.format(mb=300)})
    outside.watch(project)
    proc, seconds, peak = measured("fix", str(project), "--json")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    out = json.loads(proc.stdout)
    assert out["status"] == "passing", out
    cache = du(_private_cache)
    print(f"300 MB of prints: {seconds:.1f} s, cache {cache / MB:.1f} MiB, peak RSS {peak / MB:.0f} MiB")
    assert cache < 16 * MB, f"the cache keeps {cache / MB:.0f} MiB"
    assert peak < 300 * MB, f"peak RSS {peak / MB:.0f} MiB"
    outside.check()


def test_uncaptured_and_fd_level_output_keep_the_run_log_bounded(tmp_path, outside, _private_cache):
    """``-s`` in test_args, prints and a subprocess writing straight to fd 1 and 2: the run log
    keeps its head and tail, and a failing test still reports the end of its own output."""
    files = {
        "pyproject.toml": '[tool.frognano]\ntest_args = ["-s"]\nfsize_mb = 16\n',
        "tests/test_loud.py": """
            import subprocess
            import sys

            from pkg.mod import add

            def test_prints_and_spawns():
                line = "y" * 1023 + "\\n"
                for _ in range(24 * 1024):
                    print(line, end="")
                code = "import os\\nfor _ in range(24 * 1024): os.write(1, b'z' * 1024); os.write(2, b'e' * 1024)"
                subprocess.run([sys.executable, "-c", code], check=True)
                assert add(1, 2) == 3

            def test_loud_failure():
                print("w" * 20 * 1024 * 1024)
                print("the last words")
                assert add(2, 2) == 5
            """,
    }
    project = project_with(tmp_path, files)
    outside.watch(project)
    proc = frognano("fix", str(project), "--json")
    out = json.loads(proc.stdout)
    assert out["failing"] == ["tests/test_loud.py::test_loud_failure"], out
    assert du(_private_cache) < 16 * MB, f"the cache keeps {du(_private_cache) / MB:.0f} MiB"
    logs = list(_private_cache.rglob("log-*.txt"))
    assert logs and all(p.stat().st_size <= 3 * MB for p in logs), [p.stat().st_size for p in logs]
    assert any(b"bytes of output left out" in p.read_bytes() for p in logs)
    outside.check()


def test_per_test_output_is_its_own_and_bounded(tmp_path):
    """What a failing test reports as its stdout is the end of its own output (not pytest's
    progress dots, not the module's import-time prints), whatever it printed."""
    from frognano.sandbox.runner import RunnerConfig, TestRunner
    from frognano.sandbox.workspace import Workspace

    project = project_with(tmp_path, {"tests/test_talk.py": """
        import os
        import sys

        print("at import")

        def test_talks():
            print("x" * 100_000)
            print("said by print")
            os.write(1, b"said by fd 1\\n")
            sys.stderr.write("said on stderr\\n")
            assert False

        def test_quiet():
            assert False
        """})
    for warm in (True, False):
        with Workspace(project) as ws:
            ws.sync()
            with TestRunner(ws, RunnerConfig(warm=warm, max_output=200)) as runner:
                run = runner.run(["tests/test_talk.py::test_talks", "tests/test_talk.py::test_quiet"])
        talks, quiet = run.tests["tests/test_talk.py::test_talks"], run.tests["tests/test_talk.py::test_quiet"]
        assert talks.stdout.endswith("said by print\nsaid by fd 1\n") and len(talks.stdout) <= 203, talks.stdout
        assert talks.stderr == "said on stderr\n"
        assert quiet.stdout == "" and quiet.stderr == "", (quiet.stdout, quiet.stderr)


# -- watch mode -------------------------------------------------------------------------------------

def test_watch_with_a_bad_setting_is_exit_2_naming_the_key(tmp_path, outside):
    project = project_with(tmp_path, {"pyproject.toml": "[tool.frognano]\ntimeout = nan\n"})
    outside.watch(project)
    try:
        proc = frognano("watch", str(project), timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("watch started with timeout = nan")
    assert proc.returncode == 2 and "timeout" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    outside.check()


def test_watch_reports_a_raising_conftest_and_keeps_watching(tmp_path):
    project = project_with(tmp_path, {"conftest.py": 'raise RuntimeError("conftest says no")\n'})
    with Watching(project) as w:
        line = w.wait_status(1)
        assert f"cannot import {project / 'conftest.py'}: RuntimeError: conftest says no" in line, w.text
        assert "shadow-" not in w.text
        (project / "conftest.py").write_text("# fixed\n")
        assert "✓ 1 passed" in w.wait_status(2), w.text
    assert w.code == 0 and "Traceback" not in w.text


def test_watch_a_test_printing_more_than_fsize_passes(tmp_path, outside):
    project = project_with(tmp_path, {"pyproject.toml": "[tool.frognano]\nfsize_mb = 8\n",
                                      "tests/test_huge.py": HUGE.format(mb=32)})
    outside.watch(project)
    with Watching(project) as w:
        assert "✓ 2 passed" in w.wait_status(1), w.text
    assert w.code == 0 and "File too large" not in w.text
    outside.check()


def test_watch_survives_a_non_utf8_save_and_a_syntax_error(tmp_path):
    project = project_with(tmp_path, {})
    mod = project / "pkg" / "mod.py"
    with Watching(project) as w:
        assert "✓ 1 passed" in w.wait_status(1), w.text
        mod.write_bytes(b'NAME = "caf\xe9"\n\ndef add(a, b):\n    return a + b\n')  # latin-1, undeclared
        broken = w.wait_status(2)
        assert "✗" in broken and ("utf-8" in broken.lower() or "decode" in broken.lower()), w.text
        mod.write_text("def add(a, b):\n    return a +\n")
        assert "SyntaxError" in w.wait_status(3), w.text
        mod.write_text("def add(a, b):\n    return a + b\n")
        assert "✓ 1 passed" in w.wait_status(4), w.text
        time.sleep(0.2)
    assert w.code == 0 and "Traceback" not in w.text
