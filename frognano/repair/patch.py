"""Edits, patches and fixes; unified diffs.  Writing a fix to the user's tree is ``apply.py``."""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


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


# Which passing tests a verification ran again: "suite", every originally passing selected
# test; "covering", those covering the edit.
VerificationScope = Literal["suite", "covering"]


@dataclass
class Verification:
    """What was measured in the shadow copy for a fix (docs/ARCHITECTURE.md, invariant 2)."""

    fail_to_pass: list[str]  # originally failing tests that now pass
    pass_to_pass: int  # originally passing tests run again that still pass
    scope: VerificationScope = "suite"

    def describe(self) -> str:
        n = len(self.fail_to_pass)
        m = self.pass_to_pass
        which = "test" if self.scope == "suite" else "covering test"
        return (f"{n} failing test{'s' * (n != 1)} now pass{'es' * (n == 1)}, "
                f"{m} {which}{'s' * (m != 1)} still pass{'es' * (m == 1)}")


@dataclass(frozen=True)
class EditNote:
    """What one edit of a fix does, and where: faces show it, the server titles offers with it."""

    path: str  # posix, relative to the project root
    line: int  # 1-based
    description: str  # e.g. "`>` -> `>=`"

    def __str__(self) -> str:  # the form `fix --json` has always printed
        return f"{self.path}:{self.line} {self.description}"


@dataclass(frozen=True)
class EpisodeRecord:
    """The model episode a fix came from, and where its record was saved."""

    episode: int  # 1-based, in the order the engine ran them
    path: Path | None

    def __str__(self) -> str:
        return f"model episode {self.episode}: {self.path}"


FixSource = Literal["search", "model"]  # the operator search, or a model episode


@dataclass
class Fix:
    patch: Patch
    verified: Verification
    source: FixSource = "search"
    notes: list[EditNote] = field(default_factory=list)  # what each edit does (search fixes)
    edits_tests: bool = False  # changes test code (only with allow_test_edits): offers say so
    record: EpisodeRecord | None = None  # the episode a model fix came from

    def to_json(self) -> dict:
        # The episode record is listed after the edit notes, as plain strings: the JSON contract
        # predates the structured notes.
        notes = [str(n) for n in self.notes] + ([str(self.record)] if self.record else [])
        return {
            "diff": self.patch.diff(),
            "files": self.patch.files,
            "verified": {"fail_to_pass": list(self.verified.fail_to_pass),
                         "pass_to_pass": self.verified.pass_to_pass},
            "source": self.source,
            "notes": notes,
            "edits_tests": self.edits_tests,
        }
