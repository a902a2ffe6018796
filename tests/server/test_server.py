"""The language server end to end: pytest-lsp drives ``frognano serve`` over stdio."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types

from tests.conftest import snapshot

from .lsp import (
    apply_workspace_edit,
    change,
    code_actions,
    command,
    run_command,
    open_doc,
    save,
    serve,
    uri,
    wait_for,
    wait_state,
)

pytestmark = pytest.mark.asyncio

FAILING = "tests/test_stats.py::test_is_adult[18-True]"


async def failing_calc(client, root):
    """Open calc/stats.py, save it, wait for the failing run."""
    open_doc(client, root / "calc/stats.py")
    save(client, root / "calc/stats.py")
    await wait_state(client, "failing")
    return await wait_for(lambda: client.diagnostics.get(uri(root / "tests/test_stats.py")), what="diagnostics")


async def test_diagnostics_after_save(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0}) as client:
        await failing_calc(client, root)
        errors = client.diagnostics[uri(root / "tests/test_stats.py")]
        assert [(d.range.start.line + 1, d.severity, d.code, d.source) for d in errors] == [
            (17, types.DiagnosticSeverity.Error, FAILING, "frognano")]
        assert "assert False is True" in errors[0].message
        related = {(r.location.uri, r.location.range.start.line + 1) for r in errors[0].related_information}
        assert (uri(root / "calc/stats.py"), 15) in related
        info = client.diagnostics[uri(root / "calc/stats.py")]
        assert [(d.range.start.line + 1, d.severity) for d in info] == [(15, types.DiagnosticSeverity.Information)]
        assert info[0].message.startswith("suspicious: score 0.58 (1 failing test)")
        assert client.statuses[-1] == {"state": "failing", "failing": 1, "autoFix": "off", "message": "1 failing test"}

        actions = await code_actions(client, root / "calc/stats.py", 14, info)
        assert [(a.title, a.kind, a.command.command, list(a.command.arguments)) for a in actions] == [
            (title, types.CodeActionKind.QuickFix, name, [uri(root / "calc/stats.py")])
            for title, name in [("Fix with FrogNano", "frognano.fix"), ("Show diagnosis", "frognano.showDiagnosis"),
                                ("Run tests", "frognano.runTests")]]

        # The fix, typed and saved by the user: only the covering tests run, diagnostics clear.
        n = len(client.statuses)
        fixed = (root / "calc/stats.py").read_text().replace("age > 18", "age >= 18")
        change(client, root / "calc/stats.py", 2, fixed)
        (root / "calc/stats.py").write_text(fixed)
        save(client, root / "calc/stats.py")
        passing = await wait_state(client, "passing", after=n)
        assert passing["message"] == "all 7 tests pass"
        assert list(client.diagnostics[uri(root / "tests/test_stats.py")]) == []
        assert list(client.diagnostics[uri(root / "calc/stats.py")]) == []


async def test_fix_code_action_makes_the_tests_pass(example):
    root = example("calc")
    before = snapshot(root)
    async with serve(root, {"debounceMs": 0}) as client:
        await failing_calc(client, root)
        result = await run_command(client, "frognano.fix", uri(root / "calc/stats.py"))
        assert result["status"] == "fixed"
        title = "FrogNano: `>` -> `>=` (1 failing test now passes, 6 tests still pass)"
        assert result["title"] == title
        # $/progress: begin, at least one report, end, on a server-created token.
        (token, reports), = client.progress_reports.items()
        kinds = [r.kind for r in reports]
        assert kinds[0] == "begin" and "report" in kinds and kinds[-1] == "end", kinds
        assert reports[0].cancellable
        assert client.statuses[-1]["state"] == "fixed" and client.statuses[-1]["message"] == title
        assert snapshot(root) == before  # nothing written before the user accepts

        info = client.diagnostics[uri(root / "calc/stats.py")]
        actions = await code_actions(client, root / "calc/stats.py", 14, info)
        fix = actions[0]
        assert (fix.title, fix.kind, fix.is_preferred) == (title, types.CodeActionKind.QuickFix, True)
        # Clients recognise the verified fix by this marker, not by its title.
        assert fix.data == {"frognano": "verifiedFix", "source": "search", "files": ["calc/stats.py"],
                            "editsTests": False}
        (edit,) = fix.edit.document_changes
        assert edit.text_document.uri == uri(root / "calc/stats.py")
        assert edit.text_document.version == 1  # the open document's version
        # The visible tests also accept plausible alternatives (`18` -> `17`): offered after the
        # preferred fix, in the search's rank order, each a verified edit of its own.
        alternatives = [a for a in actions[1:] if a.data is not None]
        assert 1 <= len(alternatives) <= 3
        assert [a.data["alternative"] for a in alternatives] == list(range(1, len(alternatives) + 1))
        assert all(a.title.startswith(f"FrogNano (alternative {a.data['alternative']}): ") and not a.is_preferred
                   and a.edit.document_changes[0].text_document.version == 1 for a in alternatives)
        assert "`18` -> `17`" in " ".join(a.title for a in alternatives)
        assert actions[1:len(alternatives) + 1] == alternatives
        assert [a.title for a in actions[len(alternatives) + 1:]] == ["Show diagnosis", "Run tests"]
        # The same action from the test file's Error (the cursor there, no context diagnostics).
        from_test = await code_actions(client, root / "tests/test_stats.py", 16)
        assert from_test[0].title == title

        apply_workspace_edit(fix.edit, root)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


async def test_fix_for_an_older_version_is_not_offered(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0}) as client:
        await failing_calc(client, root)
        assert (await run_command(client, "frognano.fix"))["status"] == "fixed"
        info = client.diagnostics[uri(root / "calc/stats.py")]
        assert (await code_actions(client, root / "calc/stats.py", 14, info))[0].edit is not None
        # The user types (unsaved): version 2.  The fix was verified against version 1.
        text = (root / "calc/stats.py").read_text() + "\n# a comment\n"
        change(client, root / "calc/stats.py", 2, text)
        actions = await code_actions(client, root / "calc/stats.py", 14, info)
        assert [a.title for a in actions] == ["Fix with FrogNano", "Show diagnosis", "Run tests"]
        assert all(a.edit is None for a in actions)
        assert (await command(client, "frognano.applyFix"))["applied"] is False
        # Changing it back does not resurrect the old fix either: a new one is computed.
        change(client, root / "calc/stats.py", 3, (root / "calc/stats.py").read_text())
        actions = await code_actions(client, root / "calc/stats.py", 14, info)
        assert all(a.edit is None for a in actions)
        result = await run_command(client, "frognano.fix")
        assert result["status"] == "fixed"
        actions = await code_actions(client, root / "calc/stats.py", 14, info)
        assert actions[0].edit.document_changes[0].text_document.version == 3


SLOW = {
    "slow/__init__.py": "",
    "slow/core.py": '''
        def compute(a=1, b=2):
            total = a + b
            if total > 2:
                total = total * 2 - a
            return [total, a, b]
    ''',
    "tests/test_core.py": '''
        import time

        from slow.core import compute


        def test_compute():
            time.sleep(1.5)
            assert compute() == "impossible"
    ''',
}


@pytest.mark.slow
async def test_cancelling_the_fix_stops_it_quickly(make_project):
    root = make_project(SLOW, "slow")
    async with serve(root, {"debounceMs": 0}) as client:
        open_doc(client, root / "slow/core.py")
        save(client, root / "slow/core.py")
        await wait_state(client, "failing")
        # The command answers at once with the job it started (eglot waits at most 10 s for an
        # answer; this fix takes far longer), and a second request for the same files joins it.
        started = time.monotonic()
        answer = await command(client, "frognano.fix")
        assert time.monotonic() - started < 0.5 and answer["status"] == "started", answer
        again = await command(client, "frognano.fix")
        assert again == {"status": "started", "job": answer["job"], "joined": True}
        job = asyncio.ensure_future(wait_for(lambda: client.results.get(answer["job"]), 30, what="the fix's result"))
        # Wait until one candidate ran (1.5 s of sleeping test): the next one is now running.
        token = await wait_for(lambda: next((t for t, rs in client.progress_reports.items()
                                             if any(r.kind == "report" and r.percentage for r in rs)), None),
                               timeout=30, what="a progress report after the first candidate")
        # The server keeps answering while the search runs.
        started = time.monotonic()
        await code_actions(client, root / "slow/core.py", 1)
        assert time.monotonic() - started < 1.0
        n = len(client.statuses)
        started = time.monotonic()
        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        result = (await asyncio.wait_for(job, 10))["result"]
        elapsed = time.monotonic() - started
        assert result["status"] == "cancelled"
        assert elapsed < 1.2, elapsed  # the candidate's 1.5 s test run was killed, not awaited
        assert client.progress_reports[token][-1].kind == "end"
        st = await wait_state(client, "failing", after=n)
        assert st["message"] == "fix cancelled"
        actions = await code_actions(client, root / "slow/core.py", 1)
        assert all(a.edit is None for a in actions)


async def test_invalid_settings_warn_and_fall_back(example):
    root = example("calc")
    options = {"timeout": "soon", "autoFix": "always", "maxCandidates": -3, "python": "/no/such/python",
               "debounceMs": 0, "testArgs": ["-q"], "someTypo": 1}
    async with serve(root, options) as client:
        await wait_for(lambda: len(client.messages) >= 4, what="warnings")
        shown = [m.message for m in client.messages if m.type == types.MessageType.Warning]
        for key in ("timeout", "autoFix", "maxCandidates", "python"):
            assert any(key in m for m in shown), (key, shown)
        assert any("someTypo" in m.message for m in client.log_messages)
        assert client.statuses[-1]["autoFix"] == "suggest"  # the default
        await failing_calc(client, root)  # and the server works with the defaults
        # workspace/configuration wins over initializationOptions, and is re-read on change.
        client.set_configuration({"autoFix": "off", "timeout": 5}, section="frognano")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await wait_for(lambda: client.statuses[-1]["autoFix"] == "off", what="autoFix from configuration")


@pytest.mark.slow
async def test_a_keystroke_cancels_the_background_search(make_project):
    """The background search after a failing save is for that text: a keystroke in the buffer
    stops it (its fix would be dropped when it ended), so typing costs little CPU."""
    root = make_project(SLOW, "slow")
    async with serve(root, {"debounceMs": 0, "autoFix": "suggest"}) as client:
        open_doc(client, root / "slow/core.py")
        save(client, root / "slow/core.py")
        await wait_state(client, "fixing")
        n = len(client.statuses)
        started = time.monotonic()
        change(client, root / "slow/core.py", 2, (root / "slow/core.py").read_text() + "# typing\n")
        st = await wait_state(client, "failing", after=n)
        assert st["message"] == "fix cancelled" and time.monotonic() - started < 2.0


async def test_rejected_edit_is_dropped(example):
    root = example("calc")
    before = snapshot(root)
    async with serve(root, {"debounceMs": 0, "autoFix": "apply"}, accept_edits=False) as client:
        open_doc(client, root / "calc/stats.py")
        save(client, root / "calc/stats.py")
        await wait_for(lambda: client.applied_edits, what="workspace/applyEdit")
        (sent,) = client.applied_edits
        assert sent.edit.document_changes[0].text_document.version == 1
        st = await wait_state(client, "failing", after=3)
        assert st["message"] == "the editor rejected the fix"
        assert snapshot(root) == before
        # Dropped, not retried or forced; the server keeps serving.
        actions = await code_actions(client, root / "calc/stats.py", 14)
        assert actions[0].title == "Fix with FrogNano"
        assert (await command(client, "frognano.applyFix"))["applied"] is False
        assert len(client.applied_edits) == 1
        assert await command(client, "frognano.toggleAutoFix") == "off"


async def test_bad_input_keeps_the_server_serving(example):
    root = example("calc")
    (root / "README.md").write_text("# calc\n")
    async with serve(root, {"debounceMs": 0}) as client:
        open_doc(client, root / "README.md", language="markdown")
        save(client, root / "README.md")
        assert await code_actions(client, root / "README.md", 0) == []
        assert await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier("file:///no/such/project/x.py"),
            range=types.Range(types.Position(0, 0), types.Position(0, 0)),
            context=types.CodeActionContext(diagnostics=[]))) is None
        assert await client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier("untitled:Untitled-1"),
            range=types.Range(types.Position(0, 0), types.Position(0, 0)),
            context=types.CodeActionContext(diagnostics=[]))) is None
        assert await code_actions(client, root / "calc/stats.py", 900, end_line=99999) == []
        with pytest.raises(Exception, match="expected a document URI"):
            await run_command(client, "frognano.runTests", 42)
        with pytest.raises(Exception, match="no such episode record"):
            await command(client, "frognano.showEpisode", str(root / "missing.json"))
        assert [await command(client, "frognano.toggleAutoFix") for _ in range(3)] == ["suggest", "apply", "off"]
        assert client.statuses[-1]["autoFix"] == "off"
        assert not client.diagnostics  # a markdown save runs nothing
        result = await run_command(client, "frognano.runTests")
        assert result["failing"] == [FAILING]
        text = await command(client, "frognano.showDiagnosis")
        assert FAILING in text and "calc/stats.py:15" in text


async def test_workspace_without_tests_is_idle(make_project):
    root = make_project({"lib/core.py": "def f():\n    return 1\n"}, "notests")
    async with serve(root, {"debounceMs": 0}) as client:
        open_doc(client, root / "lib/core.py")
        save(client, root / "lib/core.py")
        st = await wait_state(client, "idle", after=1)
        assert "no tests found" in st["message"]
        assert not client.diagnostics
        assert any("no tests found" in m.message for m in client.log_messages)
        # Said where every client shows it, once: not again at the next save.
        save(client, root / "lib/core.py")
        await wait_for(lambda: sum("no tests found" in m.message for m in client.log_messages) >= 2, what="a re-run")
        (shown,) = [m for m in client.messages if "no tests found" in m.message]
        assert "test_*.py" in shown.message and "pyproject.toml" in shown.message


async def test_a_package_folder_sent_as_the_workspace_is_its_project(example):
    """An editor that finds roots by version control sends the package folder of a project
    without ``.git``: the project is the nearest folder above with pytest's configuration."""
    root = example("calc")
    async with serve(root / "calc", {"debounceMs": 0}) as client:
        await failing_calc(client, root)
        errors = client.diagnostics[uri(root / "tests/test_stats.py")]
        assert [d.code for d in errors] == [FAILING]


async def test_unsaved_syntax_error_is_a_collection_error(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0}) as client:
        broken = (root / "calc/stats.py").read_text().replace("return age > 18", "return age >")
        open_doc(client, root / "calc/stats.py", text=broken)  # typed, not saved
        open_doc(client, root / "tests/test_stats.py")  # opening a test module runs it
        st = await wait_state(client, "error")
        assert "SyntaxError" in st["message"]
        diags = await wait_for(lambda: client.diagnostics.get(uri(root / "calc/stats.py")), what="syntax error")
        assert [(d.range.start.line + 1, d.severity) for d in diags] == [(15, types.DiagnosticSeverity.Error)]
        assert "SyntaxError" in diags[0].message
        (collected,) = client.diagnostics[uri(root / "tests/test_stats.py")]
        assert collected.range.start.line + 1 == 3  # the import that failed
        # Fixed in the editor and saved: the errors clear, the real failure shows.
        n = len(client.statuses)
        change(client, root / "calc/stats.py", 2, (root / "calc/stats.py").read_text())
        save(client, root / "calc/stats.py")
        await wait_state(client, "failing", after=n)
        assert list(client.diagnostics[uri(root / "calc/stats.py")])[0].severity == types.DiagnosticSeverity.Information


async def test_save_storm_runs_once(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 200}) as client:
        open_doc(client, root / "calc/stats.py")
        for _ in range(8):
            save(client, root / "calc/stats.py")
            await asyncio.sleep(0.02)
        await wait_state(client, "failing")
        await asyncio.sleep(0.5)
        assert [s["state"] for s in client.statuses] == ["idle", "running", "failing"]
        ran = [m.message for m in client.log_messages if m.message.startswith("FrogNano: ran")]
        assert len(ran) == 1, ran


async def test_model_fix_and_its_episode(example, tmp_path):
    from frognano.repair.harness import ToolCall, render_tool_call

    root = example("calc")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([render_tool_call(ToolCall(name, args)) for name, args in [
        ("edit", {"path": "calc/stats.py", "old": "return age > 18", "new": "return age >= 18"}),
        ("submit", {}),
    ]]))
    options = {"debounceMs": 0, "model": f"replay:{script}", "maxCandidates": 0, "maxPairs": 0, "episodes": 1}
    async with serve(root, options) as client:
        await failing_calc(client, root)
        result = await run_command(client, "frognano.fix")
        assert result["title"] == ("FrogNano: `return age > 18` -> `return age >= 18` "
                                   "(1 failing test now passes, 6 tests still pass)")
        actions = await code_actions(client, root / "calc/stats.py", 14)
        assert actions[0].edit is not None
        show = next(a for a in actions if a.title == "Show the model episode (FrogNano)")
        assert show.kind == types.CodeActionKind.QuickFix and show.command.command == "frognano.showEpisode"
        record = show.command.arguments[0]
        assert json.loads(Path(record).read_text())["status"] == "submitted"
        assert await command(client, "frognano.showEpisode", record) is True
        assert client.shown_documents[-1].uri == uri(Path(record))


async def test_auto_fix_suggest_offers_the_fix_without_asking(example):
    """suggest is the default: a client that sends no autoFix gets the fix offered after a
    failing save, never applied."""
    root = example("calc")
    before = snapshot(root)
    async with serve(root, {"debounceMs": 0, "autoFix": None}) as client:
        open_doc(client, root / "calc/stats.py")
        save(client, root / "calc/stats.py")
        st = await wait_state(client, "fixed")
        assert st["autoFix"] == "suggest" and st["message"].startswith("FrogNano: `>` -> `>=`")
        assert [s["state"] for s in client.statuses] == ["idle", "running", "failing", "fixing", "fixed"]
        # The search starts from the run just published: the suite does not run again.
        assert any(m.message.startswith("FrogNano: the fix job started from the last run's results and took")
                   for m in client.log_messages), [m.message for m in client.log_messages]
        actions = await code_actions(client, root / "calc/stats.py", 14)
        assert actions[0].is_preferred and actions[0].edit is not None
        assert not client.applied_edits and snapshot(root) == before


CRASHING = {
    "pkg/__init__.py": "",
    "pkg/core.py": "def value():\n    return 1\n",
    "tests/test_core.py": '''
        import os

        from pkg.core import value


        def test_value():
            assert value() == 1


        def test_crash():
            os._exit(3)
    ''',
}


async def test_crashing_tests_and_a_broken_interpreter(make_project):
    root = make_project(CRASHING, "crashing")
    async with serve(root, {"debounceMs": 0}) as client:
        open_doc(client, root / "pkg/core.py")
        save(client, root / "pkg/core.py")
        st = await wait_state(client, "failing")
        assert st["failing"] == 1
        (diag,) = await wait_for(lambda: client.diagnostics.get(uri(root / "tests/test_core.py")), what="crash")
        assert diag.code == "tests/test_core.py::test_crash" and diag.range.start.line + 1 == 10  # its def line
        assert "died" in diag.message
        hover = await client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri(root / "tests/test_core.py")), types.Position(9, 4)))
        assert "tests/test_core.py::test_crash" in hover.contents.value
        # The interpreter is changed to one that cannot run pytest: an error, not a dead server.
        client.set_configuration({"python": "/bin/false"}, section="frognano")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await wait_for(lambda: any("python='/bin/false'" in m.message for m in client.log_messages), what="reload")
        n = len(client.statuses)
        save(client, root / "pkg/core.py")
        st = await wait_state(client, "error", after=n)
        assert "failed before running any test" in st["message"]
        assert any(m.type == types.MessageType.Error for m in client.log_messages)
        assert list(client.diagnostics[uri(root / "tests/test_core.py")])  # the last diagnostics stay
        assert await code_actions(client, root / "tests/test_core.py", 9)


async def test_a_fix_found_from_the_test_file_alone_is_offered(example):
    """A client that opened only the failing test file: the fix ``frognano.fix`` reports is then
    offered as an edit on that file's Error diagnostic (the fix edits a file it never opened)."""
    root = example("calc")
    test_file = root / "tests/test_stats.py"
    async with serve(root, {"debounceMs": 0}) as client:
        open_doc(client, test_file)
        save(client, test_file)
        await wait_state(client, "failing")
        errors = await wait_for(lambda: client.diagnostics.get(uri(test_file)), what="the Error diagnostic")
        result = await run_command(client, "frognano.fix", uri(test_file))
        assert result["status"] == "fixed", result
        actions = await code_actions(client, test_file, errors[0].range.start.line, list(errors))
        assert actions[0].title == result["title"] and actions[0].edit is not None
        (edit,) = actions[0].edit.document_changes
        assert edit.text_document.uri == uri(root / "calc/stats.py") and edit.text_document.version is None


@pytest.mark.parametrize("order", ["command first (eglot)", "edit first"])
async def test_an_applied_fix_clears_the_errors_in_either_order(example, order):
    """A client applies the verified fix to the open buffer without saving and runs the action's
    command; eglot sends the command before the didChange that carries the edit.  Either way the
    tests re-run on the fixed text and the errors clear, with the buffer's current version."""
    root = example("calc")
    source = root / "calc/stats.py"
    async with serve(root, {"debounceMs": 0}) as client:
        await failing_calc(client, root)
        assert (await run_command(client, "frognano.fix", uri(source)))["status"] == "fixed"
        actions = await code_actions(client, source, 14, client.diagnostics[uri(source)])
        fix = actions[0]
        fixed = source.read_text().replace("age > 18", "age >= 18")
        n = len(client.published)
        if order == "edit first":
            change(client, source, 2, fixed)
        reply = await run_command(client, fix.command.command, *fix.command.arguments)
        if order != "edit first":
            assert reply["status"] == "waiting", reply
            change(client, source, 2, fixed)
        await wait_state(client, "passing", after=0)
        latest = {p.uri: p for p in client.published[n:]}
        assert list(latest[uri(root / "tests/test_stats.py")].diagnostics) == []
        assert list(latest[uri(source)].diagnostics) == [] and latest[uri(source)].version == 2
        # Nothing published after the clearing describes the text the fix replaced.
        assert all(p.version in (None, 2) for p in client.published[n:]), [(p.uri, p.version) for p in client.published[n:]]
