"""The shadow copy is pristine at every run, and the data the tests read is part of what they say.

Issue 25, rows 2, 8, 9, 11 and 14: files a run of the code under test leaves in the shadow copy
(a ``tests/__init__.py`` that monkeypatches the module, a ``tests/m.py`` that shadows it, a
``conftest.py`` in a new test folder, a ``pytest.toml``) are gone before the next run, in the
same session and in every later one; ``pytest.toml``/``.pytest.toml`` are pytest configuration;
a fix may not rewrite the data a test reads, nor a doctest, but may fix the code of a module that
has doctests; and a full disk, a file size limit, a sparse file or an ignored folder cost neither
a traceback nor a fully allocated copy.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frognano.config import Settings
from frognano.paths import project_cache
from frognano.repair.engine import Engine
from frognano.sandbox.specification import Specification
from frognano.sandbox.listing import list_project
from frognano.sandbox.workspace import Workspace
from tests.conftest import write_project
from tests.robustness.test_spec_and_tools import assert_one_line_error, call, fix_with, results

P = {
    "m.py": """
        def is_adult(age):
            return age > 18
        """,
    "tests/test_m.py": """
        import m

        def test_adult():
            assert m.is_adult(18) is True

        def test_child():
            assert m.is_adult(10) is False
        """,
}
# What the code under test plants in the shadow copy, each enough to make test_adult pass.
CURE = "import m\nm.is_adult = lambda age: age >= 18\n"
PLANTS = {
    "tests/__init__.py": CURE,  # a package __init__, run before the test module imports m
    "tests/m.py": "def is_adult(age):\n    return age >= 18\n",  # first on sys.path for the tests
    "tests/sub/conftest.py": CURE,  # collected (sub < test_m.py) before the tests run
    "pytest.toml": '[pytest]\naddopts = ["-k", "not adult"]\n',  # pytest 9's own file
}
OFF = {"FROGNANO_MAX_CANDIDATES": "0", "FROGNANO_MAX_PAIRS": "0", "FROGNANO_EPISODES": "0"}


def frognano_fix(project: Path, *args: str, env: dict | None = None, **popen) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--json", *args],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, **OFF, **(env or {})}, **popen)
    assert "Traceback" not in proc.stderr, proc.stderr
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"--json printed no JSON (exit {proc.returncode}): {proc.stdout!r} {proc.stderr[-2000:]}")
    return proc.returncode, report


def planting(rel: str) -> str:
    """P's module, with a first line that writes ``rel`` (PLANTS) next to itself when imported."""
    text = PLANTS[rel]
    return (f"import pathlib as _p\n_t = _p.Path(__file__).parent / {rel!r}\n"
            f"_t.parent.mkdir(parents=True, exist_ok=True)\n_t.write_text({text!r})\n"
            "def is_adult(age):\n    return age > 18\n")


# -- row 2 (and 8): a poisoned shadow copy -----------------------------------------------------------

@pytest.mark.parametrize("rel", sorted(PLANTS))
def test_a_file_planted_by_the_code_under_test_is_gone_in_every_later_session(tmp_path, rel):
    """Once with a module that plants ``rel`` in the shadow; then P, deleted and made again,
    without it: plain ``fix P`` must see test_adult fail (before: "passing", exit 0)."""
    project = write_project(tmp_path / "P", {**P, "m.py": planting(rel)})
    frognano_fix(project)
    shadow = project_cache(project.resolve()) / "shadow-0"
    assert (shadow / rel).exists(), "the planting run did not plant (the case tests nothing)"
    import shutil

    shutil.rmtree(project)
    write_project(project, P)
    code, report = frognano_fix(project)
    assert report["status"] == "unfixed" and code == 1, report
    assert report["failing"] == ["tests/test_m.py::test_adult"], report
    assert not (shadow / rel).exists()


def test_a_file_planted_during_a_session_never_judges_a_later_run(make_project, outside):
    """A model's edit plants tests/__init__.py when its run imports m; its next edit takes the
    planting out again, leaving a comment: that patch must not be "verified" (warm = false)."""
    project = make_project(P)
    outside.watch(project)
    plant = ("import pathlib\n(pathlib.Path(__file__).parent / 'tests' / '__init__.py')"
             f".write_text({CURE!r})\n")
    script = [call("edit", path="m.py", old="def is_adult", new=plant + "def is_adult"),
              call("run_tests"),
              call("edit", path="m.py", old=plant, new="# adults\n"),
              call("submit")]
    report = fix_with(project, script, warm=False)
    assert report.status == "unfixed", (report.status, report.fix and report.fix.patch.diff())
    outside.check()


def test_the_shadow_holds_exactly_the_project_after_each_run_check(make_project):
    """ensure_pristine itself removes whatever a run left (new files, folders, bytecode) and
    restores a changed project file, and says which of them could judge a later run."""
    project = make_project({**P, "data.txt": "one\n"})
    with Workspace(project) as ws:
        ws.sync()
        shadow = ws.shadow
        for rel in ("tests/__init__.py", "tests/sub/conftest.py", "x.pth", "out.txt", "new/deep/f.txt",
                    "__pycache__/m.cpython-311.pyc"):
            (shadow / rel).parent.mkdir(parents=True, exist_ok=True)
            (shadow / rel).write_text("planted\n")
        (shadow / "data.txt").write_text("two\n")
        reported = ws.ensure_pristine([])
        on_disk = sorted(str(p.relative_to(shadow)) for p in shadow.rglob("*") if p.is_file())
        assert on_disk == ["data.txt", "m.py", "tests/test_m.py"], on_disk
        assert (shadow / "data.txt").read_text() == "one\n"
        assert not (shadow / "new").exists() and not (shadow / "tests" / "sub").exists()
        assert {"tests/__init__.py", "tests/sub/conftest.py", "x.pth"} <= set(reported), reported
        assert "out.txt" not in reported  # a test's output file is cleaned, not a rewrite
        with ws.edited({"m.py": "def is_adult(age):\n    return age >= 18\n", "extra.py": "X = 1\n"}):
            assert ws.ensure_pristine([]) == []  # the candidate's own files are the shadow's
            (shadow / "m.py").write_text("def is_adult(age):\n    return True\n")
            assert ws.ensure_pristine([]) == ["m.py"]
            assert (shadow / "m.py").read_text().endswith(">= 18\n")  # the candidate's text again
        assert not (shadow / "extra.py").exists()


# -- row 8: pytest 9's configuration files -----------------------------------------------------------

@pytest.mark.parametrize("name", ["pytest.toml", ".pytest.toml"])
def test_pytest_toml_is_pytest_configuration(make_project, outside, name):
    project = make_project({**P, name: '[pytest]\ntestpaths = ["tests"]\n'})
    outside.watch(project)
    report = fix_with(project, [call("edit", path=name, old='testpaths = ["tests"]',
                                     new='testpaths = ["tests"]\naddopts = ["-k", "not adult"]'),
                                call("submit")], allow_test_edits=True)
    assert_one_line_error(results(report)[0], name, "pytest configuration")
    assert report.status == "unfixed"
    spec = Specification.load(lambda rel: '[pytest]\npython_files = ["check_*.py"]\n' if rel == name else None)
    assert spec.is_test("check_m.py")  # its python_files count like pytest.ini's
    assert spec.is_protected(f"tests/{name}") and spec.reason(f"sub/{name}")
    outside.check()


# -- row 9: data the tests read ---------------------------------------------------------------------

DATA = {
    "m.py": P["m.py"],
    "expected.json": '{"18": true, "10": false}\n',
    "tests/test_m.py": """
        import json
        from pathlib import Path

        import m

        def test_ages():
            expected = json.loads((Path(__file__).parents[1] / "expected.json").read_text())
            for age, adult in expected.items():
                assert m.is_adult(int(age)) is adult
        """,
}
DATA_HACK = [call("edit", path="expected.json", old='"18": true', new='"18": false'), call("submit")]


def test_a_fix_may_not_rewrite_the_data_a_test_reads(make_project, outside):
    project = make_project(DATA)
    outside.watch(project)
    report = fix_with(project, DATA_HACK)
    assert_one_line_error(results(report)[0], "expected.json", "allow_data_edits")
    assert report.status == "unfixed", report.fix and report.fix.patch.diff()
    outside.check()


def test_allow_data_edits_opts_in(make_project, outside):
    project = make_project(DATA)
    outside.watch(project)
    report = fix_with(project, DATA_HACK, allow_data_edits=True)
    assert report.status == "fixed" and report.fix.patch.files == ["expected.json"], report.message
    outside.check()


# -- row 11: doctests --------------------------------------------------------------------------------

DOCTESTS = {
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--doctest-modules"\n',
    "m.py": '''
        def is_adult(age):
            """Whether a person of ``age`` is an adult.

            >>> is_adult(18)
            True
            """
            return age > 18
        ''',
    "tests/test_m.py": """
        from m import is_adult

        def test_child():
            assert is_adult(10) is False
        """,
}


def test_a_module_with_doctests_stays_fixable_outside_its_docstrings(make_project, outside):
    project = make_project(DOCTESTS)
    outside.watch(project)
    with Workspace(project) as ws, Engine(ws, Settings(episodes=0)) as engine:
        report = engine.fix()
    assert report.failing == ["m.py::m.is_adult"], report.failing
    assert report.status == "fixed" and report.fix.patch.files == ["m.py"], report.message
    hack = fix_with(project, [call("edit", path="m.py", old="    True\n", new="    False\n"), call("submit")])
    assert_one_line_error(results(hack)[0], "m.py", "docstring")
    assert hack.status == "unfixed"
    outside.check()


# -- row 14: the disk --------------------------------------------------------------------------------

def test_a_full_cache_disk_is_a_named_error_with_valid_json(tmp_path):
    """The shadow's manifest lands on /dev/full: every write there fails with ENOSPC, as on a
    full disk (which needs no mount, so it runs everywhere)."""
    project = write_project(tmp_path / "P", P)
    cache = project_cache(project.resolve())
    cache.mkdir(parents=True)
    (cache / "shadow-0.manifest.tmp").symlink_to("/dev/full")
    code, report = frognano_fix(project)
    assert code == 2 and report["status"] == "error", report
    assert "no space left" in report["message"] and "FROGNANO_CACHE_DIR" in report["message"], report


def _can_mount() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _can_mount(), reason="no user namespaces here (unshare -rm) to mount a small tmpfs")
@pytest.mark.parametrize("free_kib", [4, 200])
def test_a_really_full_cache_disk_is_a_named_error(tmp_path, free_kib):
    """A 2 MiB tmpfs as the cache, filled but for ``free_kib``: before, a traceback (4 KiB) or a
    run whose results could not be written, told as "the test process failed" or a failing test."""
    project = write_project(tmp_path / "P", P)
    cache = tmp_path / "cache"
    cache.mkdir()
    script = (f"mount -t tmpfs -o size=2m tmpfs {cache} && head -c {(2048 - free_kib) * 1024} /dev/zero "
              f"> {cache}/filler; exec {sys.executable} -m frognano fix {project} --json")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **OFF, "FROGNANO_CACHE_DIR": str(cache)}, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    assert proc.returncode == 2 and report["status"] == "error", report
    assert "no space left" in report["message"], report


def test_a_tiny_file_size_limit_is_a_named_error_not_a_phantom_crash(tmp_path):
    """``ulimit -f 1``: before, the results file could not be written, a test "crashed" and a
    candidate then "fixed" it."""
    project = write_project(tmp_path / "P", P)

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    code, report = frognano_fix(project, env={"FROGNANO_MAX_CANDIDATES": "100"}, preexec_fn=limit)
    assert code == 2 and report["status"] == "error", report
    assert "ulimit -f" in report["message"], report


def test_a_sparse_file_is_copied_sparse(make_project):
    project = make_project({**P, "pyproject.toml": "[project]\nname = 'p'\n"})  # a project, however big
    big = project / "disk.img"
    size = 1 << 30
    with open(big, "wb") as f:
        f.truncate(size)
        for offset in (0, size // 2, size - 5):
            f.seek(offset)
            f.write(b"data!")
    if os.stat(big).st_blocks * 512 >= size:
        pytest.skip("this file system does not store sparse files")
    with Workspace(project) as ws:
        started = time.monotonic()
        ws.sync()
        seconds = time.monotonic() - started
        copy = ws.shadow / "disk.img"
        st = os.stat(copy)
        assert st.st_size == size and st.st_blocks <= os.stat(big).st_blocks + 64, st
        with open(copy, "rb") as f:
            for offset in (0, size // 2, size - 5):
                f.seek(offset)
                assert f.read(5) == b"data!"
            f.seek(size // 4)
            assert f.read(4) == b"\0\0\0\0"
    assert seconds < 10, seconds


def test_gitignore_is_honoured_without_git(make_project):
    project = make_project({
        **P,
        ".gitignore": "# data\nbig/\n*.log\n!keep.log\n/rootonly.txt\ndocs/**/gen\n",
        "big/blob.bin": "x\n",
        "x.log": "x\n",
        "keep.log": "x\n",
        "rootonly.txt": "x\n",
        "sub/rootonly.txt": "x\n",
        "sub/.gitignore": "local.txt\n",
        "sub/local.txt": "x\n",
        "local.txt": "x\n",
        "docs/a/b/gen/page.html": "x\n",
        "docs/index.md": "x\n",
    })
    # (tmp_path is in no git repository: the walk lists the files, not git)
    names = sorted(e.rel for e in list_project(project))
    assert names == [".gitignore", "docs/index.md", "keep.log", "local.txt", "m.py", "sub/.gitignore",
                     "sub/rootonly.txt", "tests/test_m.py"], names
