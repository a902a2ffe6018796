"""Pure parts of the server: conversions, settings parsing, test selection, runner cancel."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from lsprotocol import types

from frognano.config import Settings
from frognano.repair.localize import Location
from frognano.repair.patch import EditNote, EpisodeRecord, FileEdit, Fix, Patch, Verification
from frognano.sandbox.results import CollectError, Frame, RunResult, TestResult
from frognano.sandbox.spectra import CoverageMap
from frognano.server import convert
from frognano.server.settings import ServerSettings, camel, engine_settings, next_mode, parse_client, snake


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply TextEdits the way an LSP client does, positions in UTF-16 code units."""
    lines = convert.lsp_lines(text)

    def offset(pos: types.Position) -> int:
        start = sum(len(ln) for ln in lines[: pos.line])
        line = lines[pos.line] if pos.line < len(lines) else ""
        units = 0
        for i, ch in enumerate(line):
            if units >= pos.character:
                return start + i
            units += 2 if ord(ch) > 0xFFFF else 1
        return start + len(line)

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
    return text


@pytest.mark.parametrize("before, after", [
    ("a\nb\nc\n", "a\nB\nc\n"),
    ("a\nb\nc", "a\nb\nC"),  # no newline at the end
    ("a\nb\nc", "a\nb\nc\nd\n"),  # appended
    ("a\r\nb\r\nc\r\n", "a\r\nbb\r\nc\r\n"),  # CRLF kept
    ("x = '😀'\ny = 1\n", "x = '😀'\ny = 2\n"),  # astral characters count twice in UTF-16
    ("def f():\n    return 1\n", ""),
    ("", "print(1)\n"),
    ("a\fb\nc\n", "a\fb\nC\n"),  # a form feed is no line break in LSP
])
def test_text_edits_reproduce_the_new_text_exactly(before, after):
    edits = convert.text_edits(before, after)
    assert apply_edits(before, edits) == after


def test_line_range_counts_utf16_and_clamps():
    text = "x = 1\n    y = '😀'\n"
    rng = convert.line_range(text, 2)
    assert (rng.start.line, rng.start.character, rng.end.character) == (1, 4, 4 + 8)  # the emoji is 2 units
    assert convert.line_range(text, 2, encoding="utf-32").end.character == 4 + 7
    assert convert.line_range(text, 99).start.line == 1  # past the end: the last line
    assert convert.line_range(None, 3).start.line == 2


def test_failure_and_suspicious_diagnostics():
    nodeid = "tests/test_stats.py::test_is_adult[18-True]"
    run = RunResult(tests={
        nodeid: TestResult(nodeid, "failed", message="AssertionError: assert False is True\n +  where False = is_adult(18)",
                           frames=[Frame("tests/test_stats.py", 17, "test_is_adult"), Frame("calc/stats.py", 15, "is_adult")]),
        "tests/test_stats.py::test_mean": TestResult("tests/test_stats.py::test_mean", "passed"),
    })
    coverage = CoverageMap({nodeid: {"calc/stats.py": frozenset({15})},
                            "tests/test_stats.py::test_mean": {"calc/stats.py": frozenset({21})}})
    loc = Location("calc/stats.py", 15, 15, 0.5774, function="is_adult")
    texts = {"calc/stats.py": "\n" * 14 + "    return age > 18\n", "tests/test_stats.py": "\n" * 16 + "    assert x\n"}
    out = convert.failure_diagnostics(run, [loc], coverage, texts, lambda rel: f"file:///p/{rel}")
    (error,) = out["tests/test_stats.py"]
    assert (error.range.start.line, error.range.start.character, error.code) == (16, 4, nodeid)
    assert error.message.startswith("AssertionError: assert False is True\n +  where False")
    assert {(r.location.uri, r.message) for r in error.related_information} == {
        ("file:///p/calc/stats.py", "suspicious: score 0.58 in is_adult"),
        ("file:///p/calc/stats.py", "traceback: is_adult")}
    (info,) = out["calc/stats.py"]
    assert info.severity == types.DiagnosticSeverity.Information
    assert info.message == ("suspicious: score 0.58 (1 failing test) in is_adult\n"
                            f"fails: {nodeid}: AssertionError: assert False is True")


def test_collect_error_sites_map_the_shadow_back():
    shadow, root = "/cache/shadow-0", "/home/me/calc"
    err = CollectError("tests/test_stats.py", (
        "/venv/_pytest/python.py:528: in importtestmodule\n    mod = import_path(\n"
        "tests/test_stats.py:3: in <module>\n    from calc.stats import clamp\n"
        'E     File "/cache/shadow-0/calc/stats.py", line 15\nE       return age >\nE   SyntaxError: invalid syntax'))
    assert convert.collect_error_sites(err, shadow, root) == [("calc/stats.py", 15), ("tests/test_stats.py", 3)]
    diags = convert.collect_diagnostics([err], shadow, root, {}, lambda rel: rel)
    assert diags["calc/stats.py"][0].message == "SyntaxError: invalid syntax (stops the collection of tests/test_stats.py)"
    assert diags["tests/test_stats.py"][0].message.startswith("cannot collect tests/test_stats.py")
    bare = CollectError("tests/test_x.py", "ImportError while importing test module")
    assert convert.collect_error_sites(bare, shadow, root) == [("tests/test_x.py", 1)]


def test_fix_title_and_versioned_edit():
    edit = FileEdit("calc/stats.py", "def f(age):\n    return age > 18\n", "def f(age):\n    return age >= 18\n")
    fix = Fix(Patch((edit,)), Verification(["t"], 6), "search", [EditNote("calc/stats.py", 2, "`>` -> `>=`")])
    assert convert.fix_title(fix) == "FrogNano: `>` -> `>=` (1 failing test now passes, 6 tests still pass)"
    assert convert.fix_action_data(fix) == {"frognano": "verifiedFix", "source": "search",
                                            "files": ["calc/stats.py"], "editsTests": False}
    model = Fix(Patch((edit,)), Verification(["t"], 6), "model", record=EpisodeRecord(1, Path("x.json")))
    assert convert.fix_summary(model) == "`return age > 18` -> `return age >= 18`"
    # --json keeps printing notes as strings: the edit's, then the episode record's.
    assert fix.to_json()["notes"] == ["calc/stats.py:2 `>` -> `>=`"]
    assert model.to_json()["notes"] == ["model episode 1: x.json"]
    ws_edit = convert.workspace_edit(fix, lambda rel: f"file:///p/{rel}", {"calc/stats.py": 7})
    (change,) = ws_edit.document_changes
    assert (change.text_document.uri, change.text_document.version) == ("file:///p/calc/stats.py", 7)
    assert apply_edits(edit.before, change.edits) == edit.after
    assert convert.workspace_edit(fix, str, {}).document_changes[0].text_document.version is None


def test_status_payload_is_exactly_the_contract():
    assert convert.Status("failing", 2, "suggest", "2 failing tests").to_json() == {
        "state": "failing", "failing": 2, "autoFix": "suggest", "message": "2 failing tests"}


def test_client_settings():
    opts, problems, unknown = parse_client({"frognano": {
        "autoFix": "apply", "debounceMs": 50, "testArgs": ["-x", "-q"], "timeout": 5, "maxCandidates": 10.0,
        "model": None, "trace": {"server": "verbose"}, "colour": "red"}})
    assert opts == ServerSettings("apply", 50, {"test_args": ["-x", "-q"], "timeout": 5.0, "max_candidates": 10})
    assert problems == [] and unknown == ["colour"]
    opts, problems, _ = parse_client({"autoFix": "always", "timeout": "soon", "debounceMs": -1, "episodes": True,
                                      "testArgs": "-x -q", "maxPairs": -1, "sandboxWritable": ["rel"]})
    assert opts == ServerSettings()
    assert [p.split(" = ")[0] for p in problems] == [
        "frognano setting autoFix", "frognano setting timeout", "frognano setting debounceMs",
        "frognano setting episodes", "frognano setting testArgs", "frognano setting maxPairs",
        "frognano setting sandboxWritable"]
    # pyproject's rules (frognano.config.coerce), named by the client's key: a string where a
    # list belongs is refused with the list it probably meant, ranges are checked at once.
    assert 'testArgs must be a list of strings, e.g. testArgs = ["-x", "-q"]' in problems[4]
    assert "maxPairs must be at least 0" in problems[5] and problems[5].endswith("using the default")
    assert (camel("search_seconds"), snake("searchSeconds"), snake("max_pairs")) == ("searchSeconds", "search_seconds", "max_pairs")
    assert [next_mode(m) for m in ("off", "suggest", "apply", "nonsense")] == ["suggest", "apply", "off", "off"]


def test_engine_settings_layering_and_fallbacks(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.frognano]\ntimeout = 7\nmax_pairs = 3\n")
    settings, problems = engine_settings(tmp_path, {"max_pairs": 9, "search_seconds": -1, "python": "/no/python"},
                                         environ={})
    assert (settings.timeout, settings.max_pairs, settings.search_seconds) == (7.0, 9, Settings().search_seconds)
    assert any("searchSeconds" in p for p in problems) and any("python" in p for p in problems)
    (tmp_path / "pyproject.toml").write_text("[tool.frognano]\ntimout = 7\n")
    settings, problems = engine_settings(tmp_path, {"max_pairs": 9}, environ={})
    assert settings.max_pairs == 9 and "timout" in problems[0]


def test_runner_cancel_kills_the_run_in_flight(make_project):
    from frognano.sandbox.runner import RunnerConfig, TestRunner
    from frognano.sandbox.workspace import Workspace

    root = make_project({"tests/test_slow.py": "import time\n\ndef test_slow():\n    time.sleep(20)\n"})
    with Workspace(root) as ws:
        ws.sync()
        for warm in (True, False):
            with TestRunner(ws, RunnerConfig(warm=warm)) as runner:
                cancel = threading.Event()
                threading.Timer(1.0, cancel.set).start()
                started = time.monotonic()
                run = runner.run(None, cancel=cancel)
                assert time.monotonic() - started < 5
                assert run.cancelled and run.tests == {}
                assert runner.run(None, cancel=cancel).cancelled  # already set: nothing starts
                assert Path(ws.shadow).is_dir()


def test_a_collection_errors_summary_is_the_exception_line_not_its_last_sentence():
    """An exception whose message runs over several "E" lines ends with a fragment ("about how
    to update your code."): the summary is the line that names the exception."""
    from frognano.sandbox.results import CollectError

    message = ("tests/test_x.py:3: in <module>\n    import x\n"
               "E   pytest.PytestRemovedIn9Warning: Marks applied to fixtures have no effect\n"
               "E   See docs: https://docs.pytest.org/en/stable/deprecations.html\n"
               "E   about how to update your code.")
    assert CollectError("tests/test_x.py", message).summary == (
        "pytest.PytestRemovedIn9Warning: Marks applied to fixtures have no effect")
    assert CollectError("t", "E   assert 1 == 2").summary == "assert 1 == 2"  # no exception line: the last
