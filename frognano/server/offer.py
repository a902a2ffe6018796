"""A project's offer: the verified fix from the job that found it to the editor that applied it.

One owner, plain Python (no LSP types), so the lifecycle reads in one place and the LSP modules
are adapters over it (``fixes.py`` turns it into code actions and edits, ``diagnostics.py``
into a status, ``documents.py`` feeds it the editor's events):

* **ready**: a fix job verified a fix for one state of the files (``ReadyFix``); it is offered
  only while that state and every file's text still hold (``valid``), else it is stale;
* **awaiting**: the fix action's re-run reached the server before the action's edit (eglot's
  order); the run starts when the edit arrives (``arrived``);
* **applied**: the editor applied it; once its text is on disk it gets the undo record
  ``frognano fix --apply`` keeps (``to_record``), and with ``autoFix = "apply"`` it is never sent
  twice.

And the autoFix decision after a run (``should_search``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..repair.patch import Fix, Patch

TextOf = Callable[[str], "str | None"]  # a project-relative path -> the text the editor (or disk) holds
MAX_ALTERNATIVES = 3  # verified alternatives offered after the preferred fix


@dataclass
class ReadyFix:
    """A verified fix and the state it was computed for.  Made by ``fixes.py`` from a fix job's
    outcome; it lives here, with the offer that holds it, so that the jobs (which import the
    offer) and the offer do not import each other."""

    fix: Fix
    state: int
    title: str
    episodes: list[str] = field(default_factory=list)  # episode record paths, when a model helped
    alternatives: list[Fix] = field(default_factory=list)  # other verified fixes, best first


def _holds(patch: Patch, text_of: TextOf, side: str) -> bool:
    return all(text_of(e.path) == getattr(e, side) for e in patch.edits)


@dataclass
class Offer:
    ready: ReadyFix | None = None
    awaiting: Patch | None = None
    unrecorded: Patch | None = None
    applied: Patch | None = None  # the patch the editor last said it applied (never re-sent)

    def valid(self, state: int, text_of: TextOf) -> ReadyFix | None:
        """The ready fix, if it was computed for exactly this state and these texts."""
        ready = self.ready
        if ready is None or ready.state != state or not _holds(ready.fix.patch, text_of, "before"):
            return None
        return ready

    def patches(self) -> list[Patch]:
        """What the code actions offer: the ready fix, then its alternatives."""
        ready = self.ready
        if ready is None:
            return []
        return [ready.fix.patch, *(alt.patch for alt in ready.alternatives[:MAX_ALTERNATIVES])]

    def drop(self) -> None:
        """Nothing is offered any more (the tests pass, or the editor took or refused it)."""
        self.ready = None

    def rerun_requested(self, files: set[str], text_of: TextOf) -> str | None:
        """A fix action's re-run for ``files``: "waiting" when its edit has not arrived (the run
        waits for it), "applied" when it has (the run starts now), None for no offered fix."""
        for patch in self.patches():
            if set(patch.files) != files:
                continue
            if _holds(patch, text_of, "before"):
                self.awaiting = patch
                return "waiting"
            if _holds(patch, text_of, "after"):
                self.mark_applied(patch)
                return "applied"
        return None

    def arrived(self, text_of: TextOf) -> Patch | None:
        """After a document event: the awaited patch, once its text is what the editor holds
        (the caller runs its tests); text that is neither its own nor the one it replaces
        means the user moved on, and the wait ends."""
        patch = self.awaiting
        if patch is None:
            return None
        if _holds(patch, text_of, "after"):
            self.awaiting = None
            self.mark_applied(patch)
            return patch
        if not all(text_of(e.path) in (e.before, e.after) for e in patch.edits):
            self.awaiting = None
        return None

    def mark_applied(self, patch: Patch) -> None:
        self.applied = patch
        self.unrecorded = patch

    def to_record(self, disk_text_of: TextOf) -> Patch | None:
        """The applied patch whose undo record is due: every file holds its text on disk now.
        A file that holds something else: the user moved on, nothing of ours is left to undo."""
        patch = self.unrecorded
        if patch is None:
            return None
        if _holds(patch, disk_text_of, "after"):
            self.unrecorded = None
            return patch
        if not all(disk_text_of(e.path) in (e.before, e.after) for e in patch.edits):
            self.unrecorded = None
        return None

    def should_search(self, auto_fix: str, failing: bool, collect_errors: bool, state: int,
                      text_of: TextOf) -> bool:
        """After a run: start a background search?  Only with autoFix on, failing tests that
        collected, and no fix already verified for exactly these files."""
        return auto_fix != "off" and failing and not collect_errors and self.valid(state, text_of) is None
