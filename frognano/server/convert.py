"""Every conversion between FrogNano's results and LSP types, in one place; pure functions.

Paths <-> URIs, 1-based lines <-> LSP positions (in the negotiated position encoding), test
results and suspicious locations -> diagnostics, a verified Fix -> a versioned WorkspaceEdit
and its code-action title, the ``frognano/status`` payload.  Nothing here does I/O or knows
about threads; texts come in as strings.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from ..project_paths import nodeid_file
from ..repair.localize import Location
from ..repair.patch import Fix
from ..sandbox.results import CollectError, RunResult, TestResult
from ..sandbox.spectra import CoverageMap

SOURCE = "frognano"
CODE_SUSPICIOUS = "suspicious"
CODE_COLLECT = "collection-error"
FAR = 10_000  # a column past any line end: LSP clients clamp it to the line's length

UriOf = Callable[[str], str]  # project-relative posix path -> the URI the client knows


# -- paths and URIs ---------------------------------------------------------------------------

def path_to_uri(path: str | os.PathLike[str]) -> str:
    return from_fs_path(str(path)) or ""


def uri_to_path(uri: str) -> Path | None:
    """The file a ``file:`` URI names; None for other schemes (untitled:, git:, ...)."""
    if not uri.startswith("file:"):
        return None
    path = to_fs_path(uri)
    return Path(path) if path else None


def relative_to(path: Path, *roots: Path) -> str | None:
    """``path`` relative to the first root containing it (lexically, then resolved), posix."""
    for root in roots:
        try:
            rel = Path(os.path.normpath(path)).relative_to(root)
        except ValueError:
            continue
        return rel.as_posix() if str(rel) != "." else None
    try:
        real = Path(os.path.realpath(path))
    except OSError:
        return None
    for root in roots:
        try:
            rel = real.relative_to(os.path.realpath(root))
        except ValueError:
            continue
        return rel.as_posix() if str(rel) != "." else None
    return None


# -- positions --------------------------------------------------------------------------------

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def lsp_lines(text: str) -> list[str]:
    """Lines with their endings, split the way LSP counts lines (only \\n, \\r\\n and \\r)."""
    return _LINE.findall(text)


def units(text: str, encoding: str = "utf-16") -> int:
    """Length of ``text`` in the position encoding's code units."""
    if encoding == "utf-8":
        return len(text.encode("utf-8", "surrogatepass"))
    if encoding == "utf-32":
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _strip_eol(line: str) -> str:
    return line.rstrip("\r\n")


def line_range(text: str | None, line: int, end_line: int | None = None,
               encoding: str = "utf-16") -> types.Range:
    """1-based lines ``line..end_line`` -> a Range from the first non-blank character to the end.

    Lines past the end of the text are clamped to its last line; without the text the range
    spans the whole line (clients clamp the far column).
    """
    end_line = max(line, end_line or line)
    if text is None:
        return types.Range(types.Position(max(line - 1, 0), 0), types.Position(max(end_line - 1, 0), FAR))
    lines = lsp_lines(text) or [""]
    first = min(max(line, 1), len(lines)) - 1
    last = min(max(end_line, 1), len(lines)) - 1
    head = _strip_eol(lines[first])
    indent = len(head) - len(head.lstrip())
    start_char = units(head[:indent], encoding) if head.strip() else 0
    return types.Range(types.Position(first, start_char),
                       types.Position(last, units(_strip_eol(lines[last]), encoding)))


def ranges_touch(a: types.Range, b: types.Range) -> bool:
    """Do two ranges share a line?  (A cursor anywhere on a diagnostic's line asks about it.)"""
    return a.start.line <= b.end.line and b.start.line <= a.end.line


# -- diagnostics ------------------------------------------------------------------------------

def nodeid_function(nodeid: str) -> str:
    """``tests/t.py::Cls::test_x[1-2]`` -> ``test_x``."""
    return nodeid.split("::")[-1].split("[", 1)[0]


def def_line(text: str | None, function: str) -> int | None:
    if not text:
        return None
    m = re.search(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(function)}\b", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else None


def assertion_line(test: TestResult, text: str | None) -> int:
    """The line to put a failing test's Error on: its own frame in the test file.

    The frame of the test function itself is preferred, then the deepest frame in the test
    file (a helper defined there), then the test's ``def`` line, then line 1.
    """
    file, func = nodeid_file(test.nodeid), nodeid_function(test.nodeid)
    own = [f for f in test.frames if f.path == file]
    for f in reversed(own):
        if f.function == func:
            return f.line
    if own:
        return own[-1].line
    return def_line(text, func) or 1


def compact_message(test: TestResult, limit: int = 300) -> str:
    """The assertion, compactly: its first lines (pytest's ``where`` explanation), bounded."""
    lines = [ln.rstrip() for ln in test.message.strip().splitlines() if ln.strip()]
    if not lines:
        return {"timeout": "the test timed out", "crashed": "the test process crashed"}.get(
            test.outcome, f"test {test.outcome}")
    out = lines[0]
    for ln in lines[1:3]:
        if len(out) + len(ln) + 1 > limit:
            break
        out += "\n" + ln
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _failing_covering(loc: Location, coverage: CoverageMap, failing: Sequence[str]) -> int:
    if coverage:
        return len(coverage.tests_covering(loc.path, loc.lines) & set(failing))
    return max(loc.frames, loc.last, 1 if failing else 0)


def suspicious_message(loc: Location, n_failing: int, failure: str = "") -> str:
    """The suspicious line's message; ``failure``: the failing test and its first line, on a
    line of its own.  An editor that shows diagnostics of open files only (eglot) shows the
    test's Error only once the test file is open; this line says what fails meanwhile."""
    plural = "s" if n_failing != 1 else ""
    where = f" in {loc.function}" if loc.function else ""
    return f"suspicious: score {loc.score:.2f} ({n_failing} failing test{plural}){where}" + (
        f"\nfails: {failure}" if failure else "")


def _first_failure(run: RunResult, loc: Location, coverage: CoverageMap, failing: Sequence[str]) -> str:
    """The first failing test that runs ``loc`` (any, without coverage) and its message's first line."""
    covering = coverage.tests_covering(loc.path, loc.lines) if coverage else set(failing)
    nodeid = next((n for n in failing if n in covering), None)
    if nodeid is None:
        return ""
    summary = (run.tests[nodeid].summary or "").splitlines()
    first = summary[0] if summary else ""
    first = first if len(first) <= 120 else first[:117] + "..."
    return f"{nodeid}: {first}" if first else nodeid


def top_locations(locations: Sequence[Location], limit: int = 3) -> list[Location]:
    """The locations worth a diagnostic: the best few, not far below the best score."""
    if not locations:
        return []
    best = locations[0].score
    keep = [loc for loc in locations if loc.score >= 0.5 * best and (loc.score > 0 or loc.frames or loc.last)]
    return keep[:limit]


def failure_diagnostics(run: RunResult, locations: Sequence[Location], coverage: CoverageMap,
                     texts: Mapping[str, str], uri_of: UriOf, encoding: str = "utf-16",
                     *, top: int = 3) -> dict[str, list[types.Diagnostic]]:
    """Diagnostics by project-relative path for the failing tests of ``run``.

    An Error at each failing test's assertion line (code: the node id) whose related
    information points at the top suspicious lines and the traceback frames, and an
    Information at each top suspicious source line.
    """
    out: dict[str, list[types.Diagnostic]] = {}
    failing = [n for n in run.failing if n in run.tests]
    best = top_locations(locations, top)
    suspicious_related = [
        types.DiagnosticRelatedInformation(
            types.Location(uri_of(loc.path), line_range(texts.get(loc.path), loc.line, loc.end_line, encoding)),
            f"suspicious: score {loc.score:.2f}" + (f" in {loc.function}" if loc.function else ""))
        for loc in best
    ]
    sites: list[types.DiagnosticRelatedInformation] = []
    for nodeid in failing:
        t = run.tests[nodeid]
        file = nodeid_file(nodeid)
        line = assertion_line(t, texts.get(file))
        related = list(suspicious_related)
        for f in t.frames:
            if os.path.isabs(f.path) or (f.path == file and f.line == line):
                continue
            related.append(types.DiagnosticRelatedInformation(
                types.Location(uri_of(f.path), line_range(texts.get(f.path), f.line, None, encoding)),
                f"traceback: {f.function}"))
        rng = line_range(texts.get(file), line, None, encoding)
        out.setdefault(file, []).append(types.Diagnostic(
            range=rng, message=compact_message(t), severity=types.DiagnosticSeverity.Error,
            code=nodeid, source=SOURCE, related_information=related or None,
            data={"kind": "test", "nodeid": nodeid}))
        sites.append(types.DiagnosticRelatedInformation(types.Location(uri_of(file), rng), f"fails: {nodeid}"))
    if failing:
        for loc in best:
            n = _failing_covering(loc, coverage, failing)
            out.setdefault(loc.path, []).append(types.Diagnostic(
                range=line_range(texts.get(loc.path), loc.line, loc.end_line, encoding),
                message=suspicious_message(loc, n, _first_failure(run, loc, coverage, failing)),
                severity=types.DiagnosticSeverity.Information,
                code=CODE_SUSPICIOUS, source=SOURCE, related_information=sites[:10] or None,
                data={"kind": "suspicious", "score": round(loc.score, 4)}))
    return out


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')
_PYTEST_FRAME = re.compile(r"^(\S[^:\n]*\.py):(\d+): ", re.M)


def collect_error_sites(err: CollectError, shadow: str | None, root: str) -> list[tuple[str, int]]:
    """Where a collection error points in the project: [(relative path, line)], innermost first.

    A ``File "...", line N`` from a SyntaxError or traceback wins, then pytest's ``path:N: in``
    frames; paths in the shadow copy map back to the project.  Falls back to the collected
    file's first line.
    """
    prefixes = [p.rstrip("/") + "/" for p in (shadow, root) if p]

    def project_rel(path: str) -> str | None:
        if not os.path.isabs(path):
            return None if path.startswith("<") else path
        for prefix in prefixes:
            if path.startswith(prefix):
                return path[len(prefix):]
        return None

    sites: list[tuple[str, int]] = []
    for m in reversed(_FILE_LINE.findall(err.message)):
        rel = project_rel(m[0])
        if rel and rel.endswith(".py"):
            sites.append((rel, int(m[1])))
            break
    for m in reversed(_PYTEST_FRAME.findall(err.message)):
        rel = project_rel(m[0])
        if rel and (rel, int(m[1])) not in sites:
            sites.append((rel, int(m[1])))
            break
    if err.nodeid and not any(rel == nodeid_file(err.nodeid) for rel, _ in sites):
        sites.append((nodeid_file(err.nodeid), 1))
    return sites


def collect_diagnostics(errors: Sequence[CollectError], shadow: str | None, root: str,
                        texts: Mapping[str, str], uri_of: UriOf,
                        encoding: str = "utf-16") -> dict[str, list[types.Diagnostic]]:
    """An Error on the offending file of each collection error (a syntax error's own line),
    and one on the test module that could not be collected because of it."""
    out: dict[str, list[types.Diagnostic]] = {}
    for err in errors:
        sites = collect_error_sites(err, shadow, root)
        if not sites:
            continue
        where = err.nodeid or "the tests"
        for i, (rel, line) in enumerate(sites[:2]):
            message = err.summary if i == 0 else f"cannot collect {where}: {err.summary}"
            if i == 0 and err.nodeid and nodeid_file(err.nodeid) != rel:
                message = f"{err.summary} (stops the collection of {where})"
            related = [types.DiagnosticRelatedInformation(
                types.Location(uri_of(r), line_range(texts.get(r), ln, None, encoding)),
                "cause" if j == 0 else "collected here")
                for j, (r, ln) in enumerate(sites[:2]) if j != i]
            out.setdefault(rel, []).append(types.Diagnostic(
                range=line_range(texts.get(rel), line, None, encoding), message=message,
                severity=types.DiagnosticSeverity.Error, code=CODE_COLLECT, source=SOURCE,
                related_information=related or None, data={"kind": "collect", "nodeid": err.nodeid}))
    return out


def needed_files(run: RunResult, locations: Sequence[Location], shadow: str | None, root: str,
                 top: int = 3) -> set[str]:
    """The project files whose text the diagnostics of ``run`` need (for exact ranges)."""
    files: set[str] = set()
    for nodeid in run.failing:
        files.add(nodeid_file(nodeid))
        t = run.tests.get(nodeid)
        if t is not None:
            files.update(f.path for f in t.frames if not os.path.isabs(f.path))
    files.update(loc.path for loc in top_locations(locations, top))
    for err in run.collect_errors:
        files.update(rel for rel, _ in collect_error_sites(err, shadow, root))
    return files


def hover_markdown(rel: str, line: int, run: RunResult, locations: Sequence[Location],
                   texts: Mapping[str, str]) -> str | None:
    """What FrogNano knows about a 1-based line: failing tests asserting there, suspicion."""
    parts: list[str] = []
    for nodeid in run.failing:
        t = run.tests.get(nodeid)
        if t is None or nodeid_file(nodeid) != rel or assertion_line(t, texts.get(rel)) != line:
            continue
        body = t.message.strip() or t.outcome
        parts.append(f"**{nodeid}** {t.outcome}\n\n```\n{body[:2000]}\n```")
        if t.stdout.strip():
            parts.append(f"captured stdout:\n\n```\n{t.stdout.strip()[-1000:]}\n```")
    for loc in top_locations(locations):
        if loc.path == rel and loc.line <= line <= loc.end_line:
            parts.append(f"FrogNano: {loc.describe()}")
    return "\n\n".join(parts) or None


def diagnosis_text(run: RunResult, locations: Sequence[Location], notes: Sequence[str] = ()) -> str:
    """A plain-text diagnosis (for window/showMessage and the log)."""
    lines: list[str] = []
    failing = run.failing
    if run.collect_errors:
        lines += [f"cannot collect {e.nodeid or 'the tests'}: {e.summary}" for e in run.collect_errors]
    if failing:
        lines.append(f"{len(failing)} failing test{'s' * (len(failing) != 1)}:")
        for nodeid in failing[:10]:
            t = run.tests[nodeid]
            lines.append(f"  {nodeid}: {t.summary}")
        if locations:
            lines.append("most suspicious:")
            lines += [f"  {loc.describe()}" for loc in locations[:5]]
    elif not run.collect_errors:
        lines.append(f"all {len(run.passing)} tests pass" if run.tests else "no test results yet")
    lines += list(notes)
    return "\n".join(lines)


# -- fixes ------------------------------------------------------------------------------------

def _short(code: str, limit: int = 60) -> str:
    code = code.strip()
    return code if len(code) <= limit else code[: limit - 3] + "..."


def fix_summary(fix: Fix) -> str:
    """What the fix does, e.g. "`>` -> `>=`" (the location is in the edit itself)."""
    if fix.notes:
        return "; ".join(n.description for n in fix.notes)
    if len(fix.patch.edits) == 1:  # a one-line model edit reads best as the line itself
        e = fix.patch.edits[0]
        old, new = e.before.splitlines(), e.after.splitlines()
        ops = [op for op in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes() if op[0] != "equal"]
        if len(ops) == 1 and ops[0][0] == "replace" and ops[0][2] - ops[0][1] == 1 and ops[0][4] - ops[0][3] == 1:
            _, i1, _, j1, _ = ops[0]
            return f"`{_short(old[i1])}` -> `{_short(new[j1])}`"
    n = fix.patch.changed_lines
    return f"edit of {', '.join(fix.patch.files)} ({n} changed line{'s' * (n != 1)})"


def fix_title(fix: Fix) -> str:
    """The code action's title: ``FrogNano: `>` -> `>=` (1 failing test now passes, ...)``.

    A fix that changes test code (possible only with allowTestEdits) says so first.
    """
    edits_tests = " (edits tests)" if fix.edits_tests else ""
    return f"FrogNano{edits_tests}: {fix_summary(fix)} ({fix.verified.describe()})"


# The ``data`` of the verified fix's code action: clients recognise the offer by this marker,
# never by its title (which is prose and may change).
VERIFIED_FIX = "verifiedFix"


def fix_action_data(fix: Fix) -> dict:
    """``{"frognano": "verifiedFix", ...}``: what a client may read of the offer without parsing it."""
    return {"frognano": VERIFIED_FIX, "source": fix.source, "files": fix.patch.files,
            "editsTests": fix.edits_tests}


def text_edits(before: str, after: str, encoding: str = "utf-16") -> list[types.TextEdit]:
    """Minimal line-range TextEdits that turn ``before`` into ``after`` exactly."""
    old, new = lsp_lines(before), lsp_lines(after)
    edits: list[types.TextEdit] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(types.TextEdit(
            types.Range(_line_start(old, i1, encoding), _line_start(old, i2, encoding)),
            "".join(new[j1:j2])))
    return edits


def _line_start(lines: list[str], i: int, encoding: str) -> types.Position:
    """The position where 0-based line ``i`` starts; ``len(lines)`` is the end of the text."""
    if i < len(lines):
        return types.Position(i, 0)
    if not lines:
        return types.Position(0, 0)
    last = lines[-1]
    if last.endswith(("\n", "\r")):
        return types.Position(len(lines), 0)
    return types.Position(len(lines) - 1, units(last, encoding))


def workspace_edit(fix: Fix, uri_of: UriOf, versions: Mapping[str, int | None],
                   encoding: str = "utf-16") -> types.WorkspaceEdit:
    """The fix as versioned TextDocumentEdits: the client refuses them if a version moved.

    ``versions`` has the version of each edited file that is open in the editor; files not open
    get ``null`` (the client applies those to the file on disk, which was checked to match).
    """
    changes = [
        types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri_of(e.path),
                                                                        version=versions.get(e.path)),
            edits=text_edits(e.before, e.after, encoding))
        for e in fix.patch.edits
    ]
    return types.WorkspaceEdit(document_changes=changes)


# -- status -----------------------------------------------------------------------------------

State = Literal["idle", "running", "passing", "failing", "fixing", "fixed", "error"]
STATES: tuple[State, ...] = get_args(State)


@dataclass(frozen=True)
class Status:
    """The ``frognano/status`` notification (the VS Code status bar shows it)."""

    state: State
    failing: int = 0
    auto_fix: str = "off"  # settings.AutoFix
    message: str = ""

    def to_json(self) -> dict:
        assert self.state in STATES, self.state
        return {"state": self.state, "failing": self.failing, "autoFix": self.auto_fix, "message": self.message}
