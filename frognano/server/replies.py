"""What the server's commands answer: typed here, plain JSON on the wire.

The clients and scripts read these keys (``frognano.fix`` -> ``status``, ``title``...); a field
left empty is left out of the JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .convert import State

# fixed: a verified fix is offered; unfixed: none was found; passing: nothing fails; stale: the
# files changed while it was computed; cancelled; error: the job could not run.
FixState = Literal["fixed", "unfixed", "passing", "stale", "cancelled", "error"]


def _json(**items: Any) -> dict[str, Any]:
    return {k: v for k, v in items.items() if v not in ("", None, [])}


@dataclass(frozen=True)
class ApplyReply:
    """``frognano.applyFix``: whether the editor applied the verified fix."""

    applied: bool
    title: str = ""
    reason: str = ""  # why not

    def to_json(self) -> dict[str, Any]:
        return {"applied": self.applied, **_json(title=self.title, reason=self.reason)}


@dataclass(frozen=True)
class FixReply:
    """``frognano.fix``: the outcome of a fix job (and of applying it, with autoFix apply)."""

    status: FixState
    title: str = ""
    message: str = ""
    diff: str = ""
    files: list[str] = field(default_factory=list)
    apply: ApplyReply | None = None

    @property
    def summary(self) -> str:
        """What the progress bar ends with."""
        return self.title or self.message or self.status

    def to_json(self) -> dict[str, Any]:
        out = {"status": self.status, **_json(title=self.title, message=self.message, diff=self.diff,
                                              files=list(self.files))}
        if self.apply is not None:
            out.update(self.apply.to_json())
        return out


@dataclass(frozen=True)
class RunTestsReply:
    """``frognano.runTests``: the run's counts (``state`` ``cancelled`` when a newer one took over)."""

    state: State | Literal["cancelled"]
    failing: list[str] = field(default_factory=list)
    passed: int = 0
    ran: int = 0
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.state == "cancelled":
            return {"state": "cancelled"}
        return {"state": self.state, "failing": list(self.failing), "passed": self.passed, "ran": self.ran,
                "message": self.message}
