"""Structured test results, parsed from the pytest plugin's JSON lines."""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

FAILING_OUTCOMES = frozenset({"failed", "error", "timeout", "crashed"})


@dataclass(frozen=True)
class Frame:
    path: str  # relative to the project root when inside it, absolute otherwise
    line: int
    function: str


@dataclass
class TestResult:
    __test__ = False  # a result record, not a pytest test class

    nodeid: str
    outcome: str  # passed failed error skipped xfailed xpassed timeout crashed
    duration: float = 0.0
    message: str = ""
    frames: list[Frame] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    coverage: dict[str, list[int]] | None = None
    last: tuple[str, int] | None = None  # last executed non-test project line

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING_OUTCOMES

    @property
    def passed(self) -> bool:
        return self.outcome in ("passed", "xfailed", "xpassed", "skipped")

    @property
    def summary(self) -> str:
        """The assertion or error, compactly: its first line, bounded."""
        first = self.message.strip().splitlines()[0] if self.message.strip() else self.outcome
        return first if len(first) <= 200 else first[:197] + "..."


# An exception's first line: "ModuleNotFoundError: ...", "pytest.PytestRemovedIn9Warning: ...".
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*: ")


@dataclass(frozen=True)
class CollectError:
    nodeid: str
    message: str
    path: str = ""  # a conftest.py that raised at import (relative to the project), else ""

    @property
    def summary(self) -> str:
        lines = [ln for ln in self.message.strip().splitlines() if ln.strip()]
        # pytest puts the exception line ("E   SyntaxError: ...") near the end; an exception
        # whose message runs over several "E" lines ends with its last sentence ("See https://...
        # about how to update your code."), which alone is a fragment: the line that names the
        # exception is the summary.
        errors = [ln.lstrip()[1:].strip() for ln in lines if ln.lstrip().startswith("E ")]
        named = [e for e in errors if _EXCEPTION_LINE.match(e)]
        if named or errors:
            return (named or errors)[-1][:200]
        return (lines[-1] if lines else "collection error")[:200]


@dataclass
class RunResult:
    tests: dict[str, TestResult] = field(default_factory=dict)
    collect_errors: list[CollectError] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    exitstatus: int | None = None
    leaks: list[str] = field(default_factory=list)  # project modules imported from outside the shadow
    duration: float = 0.0
    warm: bool = False
    log_tail: str = ""
    cancelled: bool = False  # stopped by the caller's cancel event: results are partial
    # The OS sandbox: how the run was confined ("landlock ABI 7", "seatbelt"), "" when it ran
    # unconfined (``unconfined`` says why), None when the run never said (it died first).
    confinement: str | None = None
    unconfined: str = ""
    denied: dict[str, str] = field(default_factory=dict)  # path the sandbox denied -> test ("" outside one)
    # A warm session's run: how many functions it swapped in (None: the run imported the
    # project itself); or why the session could not run it (it then ran the ordinary way).
    swapped: int | None = None
    fallback: str = ""
    timing: dict[str, float] = field(default_factory=dict)  # a session run's phases, in ms
    # What the code under test patched of pytest's reporting or of the plugin during the run
    # (the plugin's check against what it captured at import): a run with any is no evidence.
    tampered: list[str] = field(default_factory=list)
    # The exit status of the run's process, as the runner saw it from outside (fresh runs: the
    # worker mirrors pytest's); None when not known.  0 is pytest's "all selected tests passed".
    returncode: int | None = None

    @property
    def failing(self) -> list[str]:
        return [n for n, t in self.tests.items() if t.failed]

    @property
    def passing(self) -> list[str]:
        return [n for n, t in self.tests.items() if t.outcome == "passed"]

    @property
    def ok(self) -> bool:
        return not self.collect_errors and not self.failing

    def relocate(self, shadow: str, root: str) -> None:
        """Name the project's own files, not the shadow copy's, in collection errors and the log.

        The shadow (``<cache>/projects/<name>-<hash>/shadow-N``) is FrogNano's business: a
        user reading "ImportError while loading conftest ..." wants the file they can open.
        """
        pattern = _shadow_pattern(shadow)
        if pattern is None:
            return
        real = root.rstrip(os.sep)

        def sub(text: str) -> str:
            return pattern.sub(lambda _: real, text)

        self.collect_errors = [CollectError(e.nodeid, sub(e.message), e.path) for e in self.collect_errors]
        self.log_tail = sub(self.log_tail)

    def merge(self, other: "RunResult") -> None:
        self.tests.update(other.tests)
        self.collect_errors.extend(e for e in other.collect_errors if e not in self.collect_errors)
        for n in other.collected:
            if n not in self.collected:
                self.collected.append(n)
        self.leaks = sorted(set(self.leaks) | set(other.leaks))
        self.exitstatus = other.exitstatus
        self.log_tail = other.log_tail or self.log_tail
        if other.confinement is not None:
            self.confinement, self.unconfined = other.confinement, other.unconfined
        for path, test in other.denied.items():
            self.denied.setdefault(path, test)
        if other.swapped is not None:
            self.swapped = (self.swapped or 0) + other.swapped
        self.fallback = other.fallback or self.fallback
        self.timing = other.timing or self.timing
        self.tampered = [*self.tampered, *(t for t in other.tampered if t not in self.tampered)]


def _shadow_pattern(shadow: str) -> re.Pattern[str] | None:
    """The shadow's path, as given or resolved, not followed by more of a name (shadow-1 is
    not shadow-10)."""
    spellings = {s.rstrip(os.sep) for s in (shadow, os.path.realpath(shadow)) if s.rstrip(os.sep)}
    if not spellings:
        return None
    alternatives = "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))
    return re.compile(f"(?:{alternatives})(?![\\w.-])")


def parse_results(path: Path) -> tuple[RunResult, str | None]:
    """Parse a results file; also return the nodeid of a test that started but never finished."""
    run = RunResult()
    running: str | None = None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return run, None
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            # The last line of a run killed mid-write; everything before it is intact.
            log.debug("ignoring a partial results line: %.80s", line)
            continue
        kind = rec.get("kind")
        if kind == "collected":
            run.collected = list(rec["nodeids"])
        elif kind == "collect_error":
            run.collect_errors.append(CollectError(rec["nodeid"], rec.get("message", ""), rec.get("path", "")))
        elif kind == "start":
            running = rec["nodeid"]
        elif kind == "result":
            last = rec.get("last")
            run.tests[rec["nodeid"]] = TestResult(
                nodeid=rec["nodeid"],
                outcome=rec["outcome"],
                duration=float(rec.get("duration", 0.0)),
                message=rec.get("message", ""),
                frames=[Frame(f["path"], int(f["line"]), f["function"]) for f in rec.get("frames", [])],
                stdout=rec.get("stdout", ""),
                stderr=rec.get("stderr", ""),
                coverage=rec.get("coverage"),
                last=(last[0], int(last[1])) if last else None,
            )
            if running == rec["nodeid"]:
                running = None
        elif kind == "end":
            run.exitstatus = rec.get("exitstatus")
            run.leaks = rec.get("leaks", [])
            for path, test in rec.get("denied", []):
                run.denied.setdefault(path, test)
        elif kind == "sandbox":
            run.confinement, run.unconfined = rec.get("confined", ""), rec.get("reason", "")
        elif kind == "swapped":
            run.swapped = int(rec.get("functions", 0))
        elif kind == "fallback":
            run.fallback = str(rec.get("reason", ""))
        elif kind == "tampered":
            what = str(rec.get("what", ""))[:200]
            if what and what not in run.tampered:
                run.tampered.append(what)
        elif kind == "timing":
            run.timing = {k: float(v) for k, v in rec.items() if k != "kind"}
    return run, running


def unfinished_lines(path: Path) -> tuple[dict[str, list[int]] | None, tuple[str, int] | None]:
    """The lines the last test of a diagnosis run had run for the first time (the plugin's
    ``<results>.lines``: ``is_test<TAB>relpath<TAB>line``), and the last of them outside test
    files: the coverage of a test killed before it could report, None when there is none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None, None
    lines: dict[str, set[int]] = {}
    last: tuple[str, int] | None = None
    for row in text.splitlines():
        parts = row.split("\t")
        if len(parts) != 3 or not parts[2].isdigit():
            continue  # the last row of a run killed mid-write
        lines.setdefault(parts[1], set()).add(int(parts[2]))
        if parts[0] == "0":
            last = (parts[1], int(parts[2]))
    return ({rel: sorted(ln) for rel, ln in lines.items()} or None), last
