"""What ``autoFix = "suggest"`` costs: the server's CPU after a failing save, idle and while typing.

What it measures
    The real ``frognano serve`` over stdio (pytest-lsp's client, as the editor tests), on a copy
    of a bundled example, ``debounceMs`` 300 (the default).  One failing save of the buggy file,
    then either nothing (``idle``) or typing in that buffer (``typing``: one
    ``textDocument/didChange`` every 150 ms, no save) for the whole window.  The CPU seconds
    the server and every process under it (the test runner's fork server and its children)
    spent in the window, from the save on, are summed from ``/proc`` (psutil): user + system,
    and the children each one has reaped.

    ``autoFix off`` is the baseline; ``suggest`` starts the background search after the failing
    run.  A keystroke cancels it (its fix would be for text that no longer exists), so while the
    user types, the extra CPU is bounded by the time from the run's end to the first keystroke.
    Idle, suggest spends one search, once per failing save; it then offers the fix.

    .venv/bin/python benchmarks/autofix_cost.py [--window 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

REPO = Path(__file__).resolve().parent.parent
PROJECTS = {"calc": "calc/stats.py", "shapes": "src/shapes/geometry.py"}


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants, with the children each has reaped."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


async def one(root: Path, saved: str, auto_fix: str, typing: bool, window: float) -> dict:
    from lsprotocol import types
    from pygls.uris import from_fs_path
    from pytest_lsp import client_capabilities, make_test_lsp_client

    client = make_test_lsp_client()
    statuses: list = []
    client.feature("frognano/status")(lambda params: statuses.append(params))
    client.feature("frognano/result")(lambda params: None)
    client.feature(types.CLIENT_REGISTER_CAPABILITY)(lambda params: None)
    await client.start_io(sys.executable, "-m", "frognano", "serve")
    pid = client._server.pid  # pygls keeps the server's process here
    uri = from_fs_path(str(root / saved))
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=from_fs_path(str(root)),
            workspace_folders=[types.WorkspaceFolder(uri=from_fs_path(str(root)), name=root.name)],
            initialization_options={"autoFix": auto_fix, "debounceMs": 300}))
        text = (root / saved).read_text()
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=text)))
        await asyncio.sleep(3.0)  # the first-open run (cold start) is not what is measured
        before = tree_cpu(pid)
        started = time.monotonic()
        client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))
        version = 1
        while time.monotonic() - started < window:
            await asyncio.sleep(0.15)
            if typing:
                version += 1
                text += "#" if version % 40 else "\n"
                client.text_document_did_change(types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
        spent = tree_cpu(pid) - before
        states = [getattr(s, "state", None) or s["state"] for s in statuses]
        return {"cpu": spent, "fixed": "fixed" in states, "fixing": "fixing" in states}
    finally:
        try:
            await asyncio.wait_for(client.shutdown_session(), 15)
        except Exception:  # noqa: BLE001
            pass
        await client.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=8.0, help="seconds measured after the save")
    parser.add_argument("--repeats", type=int, default=2, help="runs per cell (the median is shown)")
    args = parser.parse_args(argv)
    body = []
    with tempfile.TemporaryDirectory(prefix="frognano-autofix-") as scratch:
        for name, saved in PROJECTS.items():
            for typing in (False, True):
                cells = {}
                for auto_fix in ("off", "suggest"):
                    runs = []
                    for i in range(args.repeats):
                        root = Path(scratch) / f"{name}-{auto_fix}-{typing}-{i}"
                        shutil.copytree(REPO / "examples" / name, root)
                        runs.append(asyncio.run(one(root, saved, auto_fix, typing, args.window)))
                    cells[auto_fix] = (statistics.median(r["cpu"] for r in runs), runs)
                off, on = cells["off"][0], cells["suggest"][0]
                offered = sum(r["fixed"] for r in cells["suggest"][1])
                body.append([name, "typing" if typing else "idle", f"{off:.2f}", f"{on:.2f}",
                             f"{on / off:.2f}x" if off else "-", f"{on - off:+.2f}",
                             f"{offered}/{args.repeats}"])
    _table.print_table(f"server CPU seconds in the {args.window:g} s after a failing save (median of "
                       f"{args.repeats})", ["project", "then", "autoFix off", "suggest", "ratio", "extra s",
                                            "fix offered"], body, left={0, 1})
    return 0


if __name__ == "__main__":
    sys.exit(main())
