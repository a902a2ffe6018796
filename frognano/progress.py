"""The one progress protocol: how long work tells a face what it is doing.

The repair engine, task synthesis, watch mode, the language server (as ``$/progress``) and
training all report through it, so any face can show any of them: a rich bar on a terminal,
a dim line per phase in a log, an LSP work-done progress in the editor.

A piece of work is a sequence of *phases* (``phase("searching for a fix", total=80)``), each
with optional counted steps (``update(12, 80, "calc.py:4 < -> <=")``).  Calls come from the
thread doing the work; an implementation that draws on another thread does its own locking.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """What a face shows while work runs."""

    def phase(self, title: str, total: int | None = None) -> None:
        """A new phase starts (its step count, when known)."""
        ...

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        """``done`` steps of the current phase are finished; ``note`` names the latest."""
        ...


class Silent:
    """Progress nobody watches."""

    def phase(self, title: str, total: int | None = None) -> None:
        pass

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        pass


class Relay:
    """Forwards to a target that can change between jobs (None: nobody listens).

    The server's project holds one engine across jobs; each fix job sets the target to its own
    ``$/progress`` token and clears it when done.
    """

    def __init__(self, target: Progress | None = None) -> None:
        self.target = target

    def phase(self, title: str, total: int | None = None) -> None:
        if self.target is not None:
            self.target.phase(title, total)

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self.target is not None:
            self.target.update(done, total, note)
