"""The tests are the specification, and nothing a model sends reaches outside the project.

docs/ARCHITECTURE.md, invariants 6 and 7.  Scripted (replayed) models drive real episodes end to end: a
fix may not change test modules, conftest.py, pytest's configuration or [tool.frognano] (the
edit tool refuses, the verifier refuses whatever produced the patch, verification runs from
pristine test files); ``run_tests`` takes only test ids inside the project; and arguments that
used to crash ``frognano fix`` (NUL, lone surrogates, deep JSON, huge integers, a backtracking
regular expression) are one-line tool errors while the episode goes on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from frognano.config import Settings
from frognano.repair.engine import Engine
from frognano.repair.harness import ToolCall, render_tool_call
from frognano.repair.patch import FileEdit, Patch
from frognano.repair.verify import Verifier
from frognano.runtime.replay import ReplayModel
from frognano.sandbox.workspace import Workspace

NO_SEARCH = {"max_candidates": 0, "max_pairs": 0}
THE_FIX = ("calc/stats.py", "return age > 18", "return age >= 18")


def call(name: str, **arguments) -> str:
    return render_tool_call(ToolCall(name, arguments))


def raw(body: str) -> str:
    """A reply whose tool call is given as raw text (what json.dumps would refuse to write)."""
    return f"<tool_call>\n{body}\n</tool_call>"


def fix_with(project, replies, **settings):
    # The script is the whole episode: its last reply is the last turn.  A script whose edits
    # were all refused ends at the turn budget (submitting nothing is refused too).
    settings = {**NO_SEARCH, "episodes": 1, "max_turns": len(replies), **settings}
    with Workspace(project) as ws, Engine(ws, Settings(**settings), model=ReplayModel(replies)) as engine:
        return engine.fix()


def results(report) -> list[str]:
    (episode,) = report.episodes
    return [t.result for t in episode.turns]


def assert_one_line_error(text: str, *words: str) -> None:
    assert text.startswith("error: ") and "\n" not in text and len(text) < 400, text
    for word in words:
        assert word in text, (word, text)


def fix_calc() -> list[str]:
    path, old, new = THE_FIX
    return [call("edit", path=path, old=old, new=new), call("submit")]


# -- 1. the tests are the specification -----------------------------------------------------------

def test_assert_true_hack_ends_unfixed_with_exit_1(example, outside, tmp_path):
    """Rewriting the failing assertion into ``assert True`` is refused; `fix --json` says unfixed."""
    project = example("calc")
    script = tmp_path / "hack.json"
    script.write_text(json.dumps([
        call("edit", path="tests/test_stats.py", old="assert is_adult(age) is adult", new="assert True"),
        call("run_tests"),
        call("submit"),
    ]))
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.frognano]\nmax_candidates = 0\nmax_pairs = 0\nmax_turns = 3\n")
    outside.watch(project)
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model", f"replay:{script}",
                           "--episodes", "1", "--json"], capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert out["status"] == "unfixed" and out["fix"] is None
    record = json.loads(open(out["episodes"][0]["record"]).read())
    edit_reply = record["turns"][0]["result"]
    assert_one_line_error(edit_reply, "tests/test_stats.py is a test module", "the tests are the specification")
    assert "1 failed" in record["turns"][1]["result"] or "failed" in record["turns"][1]["result"]
    outside.check()


@pytest.mark.parametrize("name, text, test, edit, says", [
    ("conftest.py", "import pytest\n\n@pytest.fixture\ndef expected():\n    return 1\n",
     "def test_one(expected):\n    assert one() == expected\n", dict(old="return 1", new="return 2"),
     "conftest.py"),
    ("pytest.ini", "[pytest]\naddopts = -q\n", "def test_one():\n    assert one() == 1\n",
     dict(old="-q", new="-q --deselect tests/test_m.py::test_one"), "pytest.ini is pytest configuration"),
], ids=["conftest", "pytest-ini"])
def test_edit_of_test_configuration_is_refused(make_project, outside, name, text, test, edit, says):
    project = make_project({
        "m.py": "def one():\n    return 2\n",
        name: text,
        "tests/test_m.py": "from m import one\n\n" + test,
    })
    outside.watch(project)
    report = fix_with(project, [call("edit", path=name, **edit), call("submit")])
    assert_one_line_error(results(report)[0], says, "the tests are the specification")
    assert report.status == "unfixed" and report.exit_code == 1
    outside.check()


def test_edit_of_pyproject_pytest_section_is_refused(example, outside):
    project = example("calc")  # [tool.pytest.ini_options] testpaths = ["tests"]
    outside.watch(project)
    report = fix_with(project, [call("edit", path="pyproject.toml", old='testpaths = ["tests"]',
                                     new='testpaths = ["nowhere"]'), *fix_calc()])
    assert_one_line_error(results(report)[0], "pyproject.toml", "[tool.pytest*]", "the tests are the specification")
    assert report.status == "fixed", "the episode went on to a real fix"
    outside.check()


def test_edit_of_tool_frognano_is_refused(example, outside):
    project = example("calc")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.frognano]\ntimeout = 30\n")
    outside.watch(project)
    report = fix_with(project, [call("edit", path="pyproject.toml", old="timeout = 30", new="timeout = 1"),
                                call("submit")])
    assert_one_line_error(results(report)[0], "[tool.frognano]", "the tests are the specification")
    assert report.status == "unfixed"
    outside.check()


def test_python_files_glob_marks_custom_test_modules(make_project, outside):
    """pytest collects check_*.py here: those are test modules too, wherever they live."""
    project = make_project({
        "pytest.ini": "[pytest]\npython_files = check_*.py\n",
        "m.py": "def one():\n    return 2\n",
        "check_m.py": "from m import one\n\ndef test_one():\n    assert one() == 1\n",
    })
    outside.watch(project)
    report = fix_with(project, [call("edit", path="check_m.py", old="== 1", new="== 2"), call("submit")])
    assert report.failing == ["check_m.py::test_one"]
    assert_one_line_error(results(report)[0], "check_m.py is a test module")
    assert report.status == "unfixed"
    outside.check()


WRONG_TEST = {
    "m.py": "def double(x):\n    return 2 * x\n",
    "tests/test_m.py": "from m import double\n\ndef test_double():\n    assert double(2) == 5\n\n"
                       "def test_zero():\n    assert double(0) == 0\n",
}


def test_allow_test_edits_opts_in_and_the_title_says_so(make_project, outside):
    from frognano.server.convert import fix_title

    project = make_project(WRONG_TEST)
    outside.watch(project)
    script = [call("edit", path="tests/test_m.py", old="== 5", new="== 4"), call("run_tests"), call("submit")]
    report = fix_with(project, script, allow_test_edits=True)
    assert report.status == "fixed", report.message
    assert report.fix.edits_tests and report.to_json()["fix"]["edits_tests"] is True
    assert fix_title(report.fix).startswith("FrogNano (edits tests): ")
    refused = fix_with(project, script)  # the default: no test edits
    assert_one_line_error(results(refused)[0], "tests/test_m.py is a test module", "allow_test_edits")
    assert refused.status == "unfixed"
    outside.check()


def test_opt_in_never_covers_pytest_configuration(example, outside):
    project = example("calc")
    outside.watch(project)
    report = fix_with(project, [call("edit", path="pyproject.toml", old='testpaths = ["tests"]',
                                     new='testpaths = ["nowhere"]'), call("submit")], allow_test_edits=True)
    assert_one_line_error(results(report)[0], "[tool.pytest*]")
    outside.check()


def test_verify_rejects_any_patch_touching_tests_without_running_it(example, outside):
    """Whatever produced it (search, a model, a replay): refused before any test runs."""
    project = example("calc")
    outside.watch(project)
    with Workspace(project) as ws, Engine(ws, Settings(**NO_SEARCH)) as engine:
        diagnosis = engine.diagnose()
        verifier = Verifier(ws, engine.runner, diagnosis.run, diagnosis.coverage, timeout=30, factor=10)
        test_file = "tests/test_stats.py"
        before = ws.read(test_file)
        hack = Patch((FileEdit(test_file, before, before.replace("assert is_adult(age) is adult", "assert True")),))
        result = verifier.check(hack)
        assert not result.verified and "the tests are the specification" in result.refused
        assert verifier.confirm(hack) is None
        assert verifier.runs == 0, "a refused patch is never run"
        stats = "calc/stats.py"
        real = Patch((FileEdit(stats, ws.read(stats), ws.read(stats).replace("age > 18", "age >= 18")),))
        assert verifier.check(real).verified and verifier.confirm(real) is not None
    outside.check()


def test_verification_runs_pristine_tests_after_the_code_rewrote_them(make_project, outside):
    """Code under test that rewrites a test file in the shadow during one run (the model's own
    run_tests) cannot make a later verification pass: the test is restored before each run,
    and a run during which it was rewritten counts for nothing."""
    project = make_project({
        "m.py": "def one():\n    return 2\n",
        "tests/test_m.py": "from m import one\n\ndef test_one():\n    assert one() == 1\n",
    })
    outside.watch(project)
    sneaky = ("import pathlib\n"
              "pathlib.Path(__file__).with_name('tests').joinpath('test_m.py')"
              ".write_text('def test_one():\\n    assert True\\n')\n\n\ndef one():")
    report = fix_with(project, [call("edit", path="m.py", old="def one():", new=sneaky),
                                call("run_tests"), call("run_tests"), call("submit")])
    assert report.episodes[0].status == "submitted"
    assert report.status == "unfixed", report.fix and report.fix.patch.diff()
    assert any("rewritten by the code under test" in n for n in report.notes), report.notes
    outside.check()


def test_sync_restores_shadow_files_a_run_changed(make_project):
    project = make_project({"m.py": "X = 1\n", "tests/test_m.py": "def test_x():\n    assert True\n"})
    with Workspace(project) as ws:
        ws.sync()
        (ws.shadow / "tests/test_m.py").write_text("def test_x():\n    assert False\n")
        (ws.shadow / "tests/conftest.py").write_text("collect_ignore = ['test_m.py']\n")
        ws.sync()  # a later session: the project did not change, the shadow did
        assert (ws.shadow / "tests/test_m.py").read_text() == "def test_x():\n    assert True\n"
        assert not (ws.shadow / "tests/conftest.py").exists(), "a planted conftest.py is removed"


def test_pristine_means_the_users_buffer(make_project):
    """In the editor, an unsaved test buffer is the user's version: restored, never the disk's."""
    project = make_project({"m.py": "X = 1\n", "tests/test_m.py": "def test_x():\n    assert True\n"})
    with Workspace(project) as ws:
        ws.sync()
        typed = "def test_x():\n    assert 1 == 1  # typed, unsaved\n"
        ws.set_overlay({"tests/test_m.py": typed})
        assert ws.ensure_pristine(["tests/test_m.py"]) == []
        (ws.shadow / "tests/test_m.py").write_text("def test_x():\n    pass\n")
        (ws.shadow / "tests/conftest.py").write_text("# planted\n")
        restored = ws.ensure_pristine(["tests/test_m.py"], ["tests/conftest.py"])
        assert restored == ["tests/test_m.py", "tests/conftest.py"]
        assert (ws.shadow / "tests/test_m.py").read_text() == typed
        assert not (ws.shadow / "tests/conftest.py").exists()


def test_specification_sections_of_shared_config_files():
    from frognano.sandbox.specification import Specification

    spec = Specification()
    pyproject = '[project]\nname = "x"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    assert spec.reason("pyproject.toml", pyproject, pyproject.replace('"x"', '"y"')) is None
    assert "[tool.pytest*]" in spec.reason("pyproject.toml", pyproject, pyproject.replace('"-q"', '"-x"'))
    assert spec.reason("pyproject.toml", pyproject, pyproject + "\n[tool.frognano]\ntimeout = 1\n")
    assert spec.reason("pyproject.toml", pyproject, pyproject + "[tool.pytest]\nminversion = '9'\n")
    assert spec.reason("pyproject.toml", pyproject, pyproject + "[[[broken")
    cfg = "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n"
    assert spec.reason("setup.cfg", cfg, cfg.replace("name = x", "name = y")) is None
    assert spec.reason("setup.cfg", cfg, cfg.replace("-q", "-x"))
    assert spec.reason("tox.ini", "[tox]\nenvlist = py3\n", "[tox]\nenvlist = py3\n[pytest]\naddopts = -x\n")
    assert spec.reason("sub/conftest.py") and spec.reason("pkg/test_x.py") and spec.reason("a/tests/data.json")
    assert spec.reason(".pytest.ini", "", "")  # pytest's own file: whole-file, even unchanged text
    assert spec.reason("src/pkg/mod.py", "a = 1\n", "a = 2\n") is None
    assert spec.reason("tests/test_x.py", allow_test_edits=True) is None
    assert spec.reason("pytest.ini", allow_test_edits=True)
    custom = Specification.load({"pytest.ini": "[pytest]\npython_files = check_*.py\n"}.get, ["suite/a.py::t"])
    assert custom.reason("lib/check_m.py") and custom.reason("suite/a.py") and not custom.reason("lib/m.py")


def test_synthesis_never_injects_into_test_modules(make_project):
    """check_*.py is collected as tests here; no injected bug may land in it."""
    from frognano.sandbox.runner import TestRunner
    from frognano.sandbox.spectra import CoverageMap
    from frognano.synthesis.inject import candidate_bugs

    project = make_project({
        "pytest.ini": "[pytest]\npython_files = check_*.py\n",
        "m.py": "def one():\n    return 1\n",
        "check_m.py": "from m import one\n\ndef helper(x):\n    return x + 0\n\n"
                      "def test_one():\n    assert helper(one()) == 1\n",
    })
    with Workspace(project) as ws:
        ws.sync()
        with TestRunner(ws) as runner:
            run = runner.run(None, coverage=True)
        assert run.passing == ["check_m.py::test_one"]
        bugs = candidate_bugs(ws, CoverageMap.from_run(run))
    assert bugs and {m.path for m in bugs} == {"m.py"}


# -- 2. run_tests accepts only test ids inside the project ----------------------------------------

SELECTION = {
    "m.py": "def one():\n    return 2\n",
    "tests/test_m.py": "from m import one\n\ndef test_one():\n    assert one() == 1\n\n"
                       "def test_tmp(tmp_path):\n    (tmp_path / 'x').write_text('x')\n",
}
M_FIX = [call("edit", path="m.py", old="return 2", new="return 1"), call("submit")]


def _selection_case(make_project, outside, selection: list[str], *words: str):
    project = make_project(SELECTION)
    outside.watch(project)
    report = fix_with(project, [call("run_tests", selection=selection), *M_FIX])
    assert_one_line_error(results(report)[0], "run_tests", *words)
    assert report.status == "fixed", "the episode went on"
    outside.check()


def test_run_tests_of_nothing_says_so(make_project, outside):
    """A selection no test matches (SmolLM2 sent ``[", "]``) is an error naming a real test id,
    not "0 passed, 0 failed", which a weak model reads as success."""
    _selection_case(make_project, outside, [", "], "no test matches", "tests/test_m.py::test_one")


def test_run_tests_refuses_junitxml(make_project, outside):
    _selection_case(make_project, outside, [f"--junitxml={outside.sentinel / 'precious.txt'}"], "options")


def test_run_tests_refuses_basetemp(make_project, outside):
    _selection_case(make_project, outside, [f"--basetemp={outside.sentinel}"], "options")


def test_run_tests_refuses_log_file(make_project, outside):
    _selection_case(make_project, outside, [f"--log-file={outside.sentinel / 'precious.txt'}"], "options")


def test_run_tests_refuses_debug(make_project, outside):
    _selection_case(make_project, outside, ["tests/test_m.py", f"--debug={outside.sentinel / 'precious.txt'}"],
                    "options")


def test_run_tests_refuses_an_at_file(make_project, outside):
    args = outside.sentinel / "args.txt"
    args.write_text(f"--junitxml={outside.sentinel / 'report.xml'}\n")
    _selection_case(make_project, outside, [f"@{args}"], "@files")


def test_run_tests_refuses_nul(make_project, outside):
    _selection_case(make_project, outside, ["tests/test_m.py\x00--junitxml=x.xml"], "control characters")


def test_run_tests_refuses_control_characters(make_project, outside):
    _selection_case(make_project, outside, ["tests/test_m.py::test_one\x1b[2J"], "control characters")


def test_run_tests_refuses_paths_outside_the_project(make_project, outside):
    _selection_case(make_project, outside, ["../elsewhere/precious.txt"], "outside the project")


def test_run_tests_refuses_a_link_leading_out_of_the_project(make_project, outside):
    # Not named test_*.py: only an explicit selection would make pytest run it.
    (outside.sentinel / "evil.py").write_text(
        "import pathlib\n\ndef test_evil():\n    pathlib.Path(__file__).with_name('pwned.txt').write_text('x')\n")
    project = make_project(SELECTION)
    os.symlink(outside.sentinel, project / "ext")
    outside.watch(project)
    report = fix_with(project, [call("run_tests", selection=["ext/evil.py"]), *M_FIX])
    assert_one_line_error(results(report)[0], "outside the project")
    assert report.status == "fixed"
    outside.check()


def test_valid_selections_still_run(make_project, outside):
    project = make_project(SELECTION)
    outside.watch(project)
    report = fix_with(project, [call("run_tests", selection=["./tests/test_m.py::test_one", "tests"]),
                                call("run_tests", selection=["all"]), *M_FIX])
    first, second = results(report)[:2]
    assert first.startswith("1 passed, 1 failed") and second.startswith("1 passed, 1 failed"), (first, second)
    assert report.status == "fixed"
    outside.check()


# -- 2. arguments that used to crash `frognano fix` -----------------------------------------------

def _recovers(example, outside, bad: str, *words: str):
    project = example("calc")
    outside.watch(project)
    report = fix_with(project, [bad, *fix_calc()])
    assert_one_line_error(results(report)[0], *words)
    assert report.status == "fixed" and report.episodes[0].status == "submitted"
    outside.check()
    return report


def test_nul_byte_in_a_path(example, outside):
    _recovers(example, outside, call("read", path="calc/stats.py\x00"), "control characters")


def test_lone_surrogate_in_a_path(example, outside):
    _recovers(example, outside, call("read", path="calc/\ud800.py"), "invalid text")


def test_lone_surrogate_in_edited_text(example, outside):
    _recovers(example, outside, call("edit", path="calc/stats.py", old="age > 18", new="age > 18  # \ud800"),
              "surrogate")


def test_json_nested_thousands_deep(example, outside):
    deep = "[" * 20000 + "]" * 20000
    _recovers(example, outside, raw(f'{{"name": "run_tests", "arguments": {{"selection": {deep}}}}}'),
              "nested too deeply")


def test_five_thousand_digit_integer(example, outside):
    huge = "9" * 5000
    _recovers(example, outside, raw(f'{{"name": "read", "arguments": {{"path": "calc/stats.py", "start": {huge}}}}}'),
              "not valid JSON")


@pytest.mark.timeout(120)
def test_catastrophic_regex_is_bounded_in_time(example, outside):
    project = example("calc")
    (project / "calc" / "notes.py").write_text('"""\n' + "a" * 40 + "!\n" + '"""\n')
    outside.watch(project)
    report = fix_with(project, [call("search", pattern="^(a+)+$"), call("search", pattern="is_adult"), *fix_calc()])
    first, second = results(report)[:2]
    assert_one_line_error(first, "search", "took longer than")
    assert "calc/stats.py:13: def is_adult(age):" in second, second
    assert report.status == "fixed"
    outside.check()


@pytest.mark.timeout(240)
def test_fix_json_survives_every_bad_argument(example, outside, tmp_path):
    """The whole list through the command line: JSON on stdout, the episode goes on to a fix."""
    project = example("calc")
    (project / "calc" / "notes.py").write_text('"""\n' + "a" * 40 + "!\n" + '"""\n')
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.frognano]\nmax_candidates = 0\nmax_pairs = 0\n")
    outside.watch(project)
    script = tmp_path / "bad.json"
    script.write_text(json.dumps([
        call("read", path="calc/stats.py\x00"),
        call("read", path="calc/\ud800.py"),
        call("edit", path="calc/stats.py", old="age > 18", new="age > 18 \ud800"),
        raw('{"name": "run_tests", "arguments": {"selection": ' + "[" * 20000 + "]" * 20000 + "}}"),
        raw('{"name": "read", "arguments": {"path": "calc/stats.py", "start": ' + "9" * 5000 + "}}"),
        call("search", pattern="(a+)+$"),
        call("run_tests", selection=[f"--junitxml={outside.sentinel / 'precious.txt'}"]),
        *fix_calc(),
    ]))
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model", f"replay:{script}",
                           "--episodes", "1", "--json"], capture_output=True, text=True, timeout=200)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert out["status"] == "fixed" and out["fix"]["source"] == "model"
    assert out["episodes"][0]["status"] == "submitted" and out["episodes"][0]["turns"] == 9
    record = json.loads(open(out["episodes"][0]["record"]).read())
    for turn in record["turns"][:7]:
        assert_one_line_error(turn["result"])
    outside.check()
