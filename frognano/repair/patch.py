"""Edits, patches and fixes; unified diffs.  Writing a fix to the user's tree is ``apply.py``."""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class FileEdit:
    """The whole new text of one file, and the text it replaces."""

    path: str  # posix, relative to the project root
    before: str
    after: str

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}",
        ))


@dataclass(frozen=True)
class Patch:
    edits: tuple[FileEdit, ...]

    @property
    def files(self) -> list[str]:
        return [e.path for e in self.edits]

    def diff(self) -> str:
        return "".join(e.diff() for e in self.edits)

    def texts(self) -> dict[str, str]:
        return {e.path: e.after for e in self.edits}

    @property
    def changed_lines(self) -> int:
        return sum(1 for ln in self.diff().splitlines()
                   if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


@dataclass
class Verification:
    """What was measured in the shadow copy for a fix (DESIGN.md invariant 2)."""

    fail_to_pass: list[str]  # originally failing tests that now pass
    pass_to_pass: int  # originally passing tests run again that still pass
    scope: str = "suite"  # "suite": every originally passing selected test; "covering": those covering the edit

    def describe(self) -> str:
        n = len(self.fail_to_pass)
        which = "tests" if self.scope == "suite" else "covering tests"
        return (f"{n} failing test{'s' * (n != 1)} now pass{'es' * (n == 1)}, "
                f"{self.pass_to_pass} {which} still pass")


@dataclass
class Fix:
    patch: Patch
    verified: Verification
    source: str = "search"  # "search" | "model"
    notes: list[str] = field(default_factory=list)  # what each edit does, e.g. "calc/stats.py:15 `>` -> `>=`"
    edits_tests: bool = False  # changes test code (only with allow_test_edits): offers say so

    def to_json(self) -> dict:
        return {
            "diff": self.patch.diff(),
            "files": self.patch.files,
            "verified": {"fail_to_pass": list(self.verified.fail_to_pass),
                         "pass_to_pass": self.verified.pass_to_pass},
            "source": self.source,
            "notes": list(self.notes),
            "edits_tests": self.edits_tests,
        }
