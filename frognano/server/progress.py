"""Work-done progress: a fix job's phases as ``$/progress``, and cancelling from the client.

``LspProgress`` implements ``frognano.progress.Progress`` for the engine (called on the
project's worker thread, sent by the event loop).  A job stops when the client cancels its
progress bar (``window/workDoneProgress/cancel``); the command that started it has answered
long before (``commands.started``), so there is no request left to cancel.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from lsprotocol import types

from .state import FrogNanoServer

log = logging.getLogger(__name__)


class LspProgress:
    """Engine progress -> ``$/progress`` reports, at most ten a second."""

    def __init__(self, ls: FrogNanoServer, token: str) -> None:
        self.ls, self.token = ls, token
        self.loop = ls.loop
        self.title = ""
        self._last = 0.0

    def phase(self, title: str, total: int | None = None) -> None:
        self.title = title
        self._send(title, None, force=True)

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        pct = min(100, int(100 * done / total)) if total else None
        message = f"{self.title}: {done}/{total}" if total else f"{self.title}: {done}"
        self._send(f"{message} {note}".strip(), pct)

    def _send(self, message: str, pct: int | None, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        report = types.WorkDoneProgressReport(message=message[:200], percentage=pct, cancellable=True)
        try:
            self.loop.call_soon_threadsafe(self.ls.work_done_progress.report, self.token, report)
        except RuntimeError:  # the loop is closed: the server is exiting
            pass


async def begin(ls: FrogNanoServer, title: str, cancel: threading.Event) -> LspProgress | None:
    """A cancellable progress bar whose cancel sets ``cancel`` (None: the client has none)."""
    if not ls.can("window.work_done_progress"):
        return None
    token = f"frognano-{uuid.uuid4()}"
    try:
        await ls.work_done_progress.create_async(token)
    except Exception as exc:  # noqa: BLE001 - the job runs without a progress bar
        ls.log(f"FrogNano: no progress bar ({exc})", types.MessageType.Warning)
        return None
    ls.progress_cancel[token] = cancel
    ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
        title=title, cancellable=True, message="starting", percentage=0))
    return LspProgress(ls, token)


def end(ls: FrogNanoServer, sink: LspProgress | None, message: str) -> None:
    if sink is None:
        return
    ls.progress_cancel.pop(sink.token, None)
    ls.work_done_progress.tokens.pop(sink.token, None)
    ls.work_done_progress.end(sink.token, types.WorkDoneProgressEnd(message=message))


def did_cancel(ls: FrogNanoServer, params: types.WorkDoneProgressCancelParams) -> None:
    cancel = ls.progress_cancel.get(str(params.token))
    if cancel is None:
        log.info("cancel for an unknown or finished progress: %s", params.token)
        return
    cancel.set()
    ls.log("FrogNano: fix cancelled by the client")
