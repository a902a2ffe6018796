"""Diagnostics that appear and clear without a save: on opening a project's first file, after
an applied fix to a file the editor never opened, after a change on disk reported through
``workspace/didChangeWatchedFiles``; and the document version each publication was made for.

The real ``frognano serve`` over stdio, driven by the pytest-lsp client of ``lsp.py``.
"""

from __future__ import annotations

import pytest
from lsprotocol import types

from .lsp import apply_workspace_edit, change, code_actions, command, open_doc, run_command, serve, uri, wait_for, wait_state

pytestmark = pytest.mark.asyncio

FAILING = "tests/test_stats.py::test_is_adult[18-True]"


def ran(client) -> list[str]:
    return [m.message for m in client.log_messages if m.message.startswith("FrogNano: ran")]


def errors_in(client, path) -> list[types.Diagnostic]:
    return [d for d in client.diagnostics.get(uri(path), []) if d.severity == types.DiagnosticSeverity.Error]


async def test_opening_a_file_shows_its_failures_without_a_save(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0}) as client:
        open_doc(client, root / "calc/stats.py", version=4)  # a source module, not a test: no save
        errors = await wait_for(lambda: errors_in(client, root / "tests/test_stats.py"), what="diagnostics on open")
        assert [d.code for d in errors] == [FAILING]
        assert (await wait_state(client, "failing"))["failing"] == 1
        # The open document's diagnostics carry the version the run saw; a file the run read
        # from disk (the test module, not open) carries none.
        versions = {p.uri: p.version for p in client.published}
        assert versions[uri(root / "calc/stats.py")] == 4
        assert versions[uri(root / "tests/test_stats.py")] is None

        # Results exist now: opening another file does not run the suite again.
        open_doc(client, root / "calc/__init__.py")
        await command(client, "frognano.showDiagnosis")  # a round trip: the didOpen was handled
        assert len(ran(client)) == 1, ran(client)

        # An unsaved edit, then a run: the publication names the version that run saw.
        fixed = (root / "calc/stats.py").read_text().replace("age > 18", "age >= 18")
        change(client, root / "calc/stats.py", 5, fixed)
        n = len(client.published)
        await run_command(client, "frognano.runTests", uri(root / "calc/stats.py"))
        cleared = {p.uri: p for p in client.published[n:]}
        assert list(cleared[uri(root / "tests/test_stats.py")].diagnostics) == []
        assert list(cleared[uri(root / "calc/stats.py")].diagnostics) == []
        assert cleared[uri(root / "calc/stats.py")].version == 5
        assert "age > 18" in (root / "calc/stats.py").read_text()  # the run saw the buffer, not a write


async def test_opening_files_in_a_burst_runs_once(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 300}) as client:
        for rel in ("calc/__init__.py", "calc/stats.py", "README.md"):
            open_doc(client, root / rel, language="markdown" if rel.endswith(".md") else "python")
        await wait_state(client, "failing")
        await command(client, "frognano.showDiagnosis")
        assert len(ran(client)) == 1, ran(client)
        assert [s["state"] for s in client.statuses] == ["idle", "running", "failing"]


async def test_an_applied_fix_to_an_unopened_file_clears_its_diagnostics(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0}) as client:
        # Only the test module is open; the bug, and so the fix, is in calc/stats.py.
        open_doc(client, root / "tests/test_stats.py")
        await wait_state(client, "failing")
        assert (await run_command(client, "frognano.fix", uri(root / "tests/test_stats.py")))["status"] == "fixed"
        errors = errors_in(client, root / "tests/test_stats.py")
        (fix, *_) = await code_actions(client, root / "tests/test_stats.py", 16, errors)
        assert fix.data["frognano"] == "verifiedFix"
        (edit,) = fix.edit.document_changes
        assert edit.text_document.uri == uri(root / "calc/stats.py") and edit.text_document.version is None
        # What an editor does with a code action: apply its edit (here: the unopened file, on
        # disk), then run its command.  No save, no didChangeWatchedFiles.
        apply_workspace_edit(fix.edit, root)
        assert fix.command.command == "frognano.runTests"
        assert list(fix.command.arguments) == [uri(root / "calc/stats.py"), {"frognano": "afterFix"}]
        n = len(client.statuses)
        result = await run_command(client, fix.command.command, *fix.command.arguments)
        assert result["state"] == "passing" and result["failing"] == []
        assert await wait_state(client, "passing", after=n)
        assert errors_in(client, root / "tests/test_stats.py") == []
        assert list(client.diagnostics[uri(root / "calc/stats.py")]) == []


async def test_auto_apply_reruns_the_tests_after_the_edit(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0, "autoFix": "apply"}) as client:
        open_doc(client, root / "tests/test_stats.py")
        await wait_for(lambda: client.applied_edits, timeout=120, what="workspace/applyEdit")
        # The test client wrote the edit to calc/stats.py, which it never opened; nothing is saved.
        assert "age >= 18" in (root / "calc/stats.py").read_text()
        await wait_for(lambda: client.statuses[-1]["state"] == "passing", timeout=60,
                       what=f"a passing run after the applied fix (seen {client.statuses})")
        assert errors_in(client, root / "tests/test_stats.py") == []
        assert len(client.applied_edits) == 1


async def test_a_change_on_disk_reported_by_the_watcher_reruns_the_tests(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0}) as client:
        # The server asked to watch Python files and pyproject.toml (the client supports it).
        (reg,) = [r for r in client.registrations if r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES]
        globs = {w["globPattern"] for w in reg.register_options["watchers"]}
        assert {"**/*.py", "**/pyproject.toml"} <= globs
        open_doc(client, root / "tests/test_stats.py")
        await wait_state(client, "failing")
        assert errors_in(client, root / "tests/test_stats.py")

        # A file in the virtualenv changes: not the project's code, nothing runs.
        (root / ".venv/lib").mkdir(parents=True)
        (root / ".venv/lib/site.py").write_text("x = 1\n")
        n_runs = len(ran(client))
        client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[types.FileEvent(
            uri=uri(root / ".venv/lib/site.py"), type=types.FileChangeType.Created)]))
        await command(client, "frognano.showDiagnosis")
        assert len(ran(client)) == n_runs

        # calc/stats.py (not open) is fixed on disk by another tool, and the watcher says so.
        path = root / "calc/stats.py"
        path.write_text(path.read_text().replace("age > 18", "age >= 18"))
        n = len(client.statuses)
        client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[types.FileEvent(
            uri=uri(path), type=types.FileChangeType.Changed)]))
        await wait_state(client, "passing", after=n)
        assert errors_in(client, root / "tests/test_stats.py") == []
        assert "stats.py" in ran(client)[-1], ran(client)  # the tests it affects, named by the change


async def test_empty_settings_from_a_lua_client_are_no_unknown_key(example):
    """Neovim encodes an empty Lua table as ``[]``: ``{"frognano": []}`` is no setting at all."""
    root = example("calc")
    async with serve(root, {"debounceMs": 0}, configuration={}) as client:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"frognano": []}))
        client.set_configuration({"autoFix": "suggest"}, section="frognano")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"frognano": []}))
        await wait_for(lambda: client.statuses[-1]["autoFix"] == "suggest", what="autoFix from configuration")
        assert not [m.message for m in client.log_messages if "unknown settings" in m.message]


async def test_a_fix_the_editor_claims_but_does_not_apply_is_not_sent_again(example):
    root = example("calc")
    async with serve(root, {"debounceMs": 0, "autoFix": "apply"}) as client:
        client.edit_root = None  # answers "applied" to workspace/applyEdit, changes nothing
        open_doc(client, root / "tests/test_stats.py")
        await wait_for(lambda: any("did not change" in m.message for m in client.log_messages), timeout=120,
                       what="the warning about a fix reported applied but absent")
        assert len(client.applied_edits) == 1
        assert "age > 18" in (root / "calc/stats.py").read_text()
        assert errors_in(client, root / "tests/test_stats.py")  # still failing, and said so


@pytest.mark.slow
@pytest.mark.parametrize("how", ["the undoFix command", "frognano undo"])
async def test_a_fix_applied_in_the_editor_is_undone_like_fix_apply(example, how):
    """The editor applies the verified fix (here: to a file it never opened, written to disk)
    and runs the action's command: the fix gets the undo record ``frognano fix --apply`` keeps,
    so ``frognano undo`` (or *Undo FrogNano fix*) restores exactly what the user had -- and
    refuses, naming the file, once the user changed it since."""
    import subprocess
    import sys

    root = example("calc")
    source = root / "calc/stats.py"
    original = source.read_bytes()
    async with serve(root, {"debounceMs": 0}) as client:
        open_doc(client, root / "tests/test_stats.py")
        await wait_state(client, "failing")
        assert (await run_command(client, "frognano.fix", uri(root / "tests/test_stats.py")))["status"] == "fixed"
        (fix, *_) = await code_actions(client, root / "tests/test_stats.py", 16, errors_in(client, root / "tests/test_stats.py"))
        apply_workspace_edit(fix.edit, root)
        assert (await run_command(client, fix.command.command, *fix.command.arguments))["state"] == "passing"
        await wait_for(lambda: any("`frognano undo" in m.message for m in client.log_messages), what="the undo record")
        if how == "frognano undo":
            done = subprocess.run([sys.executable, "-m", "frognano", "undo", str(root)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        else:
            reply = await command(client, "frognano.undoFix", uri(root / "tests/test_stats.py"))
            assert reply == {"undone": True, "files": ["calc/stats.py"]}
            await wait_state(client, "failing")
        assert source.read_bytes() == original
        # Applied again, then changed by the user: undo refuses and names the file.
        assert (await run_command(client, "frognano.fix", uri(root / "tests/test_stats.py")))["status"] == "fixed"
        (fix, *_) = await code_actions(client, root / "tests/test_stats.py", 16, errors_in(client, root / "tests/test_stats.py"))
        apply_workspace_edit(fix.edit, root)
        n = sum("`frognano undo" in m.message for m in client.log_messages)
        await run_command(client, fix.command.command, *fix.command.arguments)
        await wait_for(lambda: sum("`frognano undo" in m.message for m in client.log_messages) > n, what="a second record")
        source.write_text(source.read_text() + "# mine\n")
        reply = await command(client, "frognano.undoFix", uri(source))
        assert reply["undone"] is False and "calc/stats.py changed since the fix was applied" in reply["reason"]
        assert source.read_text().endswith("# mine\n")
