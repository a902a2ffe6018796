"""The tool protocol a model repairs with: prompts, tool schemas, observations, tool execution.

This module is what training and serving share (docs/ARCHITECTURE.md, invariant 3): the language server,
``frognano fix --model`` and the RL environment all build episodes from it, so a prompt or an
observation format changes here or nowhere.

Tool calls use the Qwen form the chat templates render::

    <tool_call>
    {"name": "edit", "arguments": {"path": "calc/stats.py", "old": "age > 18", "new": "age >= 18"}}
    </tool_call>

Every file access goes through ``ToolBox._path``: relative paths inside the project only, no
``..``, no absolute paths, nothing through a symlink that leaves it.  Edits live in the
episode's own copy of the texts and reach the shadow only for ``run_tests``.

Nothing a model sends reaches outside the project or crashes the episode
(docs/ARCHITECTURE.md, invariants 5 and 7): ``run_tests`` takes only test ids and paths inside the project (never a
pytest option, an ``@file``, control characters), ``edit`` refuses the specification (test
modules, conftest.py, pytest's configuration, ``[tool.frognano]``; see
``sandbox/specification.py``), ``search`` runs under a deadline, and arguments no check foresaw
(a NUL byte, a lone surrogate, JSON nested thousands deep, an integer of thousands of digits)
come back as a one-line error while the episode goes on.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import FrogNanoError
from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
from ..sandbox.specification import Specification
from ..sandbox.workspace import Workspace
from .grep import SECONDS as SEARCH_SECONDS
from .grep import GrepError, GrepTimeout, grep
from .localize import Location
from .patch import FileEdit, Patch
from .tampering import refusal as reaches_runner

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """\
You fix Python code so that the failing pytest tests pass without breaking the others.
You work on a copy of the project through tools. Reply with exactly one tool call:
<tool_call>
{"name": "<tool>", "arguments": {...}}
</tool_call>
Change source files, not tests. `candidates` lists likely one-token fixes and `apply` applies one.
After an edit, `run_tests`; when the failing tests pass, `submit`."""


MAX_CANDIDATES = 15  # entries the ``candidates`` tool lists (``apply``'s n is one of them)


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }}


TOOLS: list[dict] = [
    _tool("read", "Show numbered lines of a file.",
          {"path": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}}, ["path"]),
    _tool("search", "Find lines matching a regular expression, in one file or all Python files.",
          {"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"]),
    _tool("edit", "Replace the exact text `old` (which must occur once) with `new` in a file.",
          {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}, ["path", "old", "new"]),
    _tool("run_tests", "Run the failing tests (or the given test ids, or 'all') with the edits so far.",
          {"selection": {"type": "array", "items": {"type": "string"}}}, []),
    _tool("candidates", "List likely one-token fixes at the suspicious lines, numbered.", {}, []),
    _tool("apply", "Apply candidate number n from `candidates` (in place of the one applied before) and run "
                   "the failing tests.",
          {"n": {"type": "integer", "minimum": 1, "maximum": MAX_CANDIDATES}}, ["n"]),
    _tool("submit", "Finish: the edits so far are the fix (offered once a file is changed).", {}, []),
]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]
_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
_JSON_TYPES = {"string": str, "integer": int, "array": list, "object": dict, "boolean": bool}

READ_WINDOW = 40  # lines shown by read() without an explicit end
MAX_REPLY = 3000  # characters of any tool reply
MAX_ERROR = 300  # characters of a one-line error
MAX_DEPTH = 8  # nesting of a call's JSON (the deepest real call is 3: call, arguments, selection)
MAX_INT = 10**9  # integer arguments are line and candidate numbers
# NUL and other control characters, and lone surrogates (not text at all): never in a path or id.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class ToolError(Exception):
    """A tool call that cannot be carried out; the message goes back to the model."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def key(self) -> str:
        return json.dumps([self.name, self.arguments], sort_keys=True)


_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def parse_tool_call(text: str) -> ToolCall:
    """The first tool call in a reply; ToolError (one line) when there is none or it is malformed."""
    match = _CALL.search(text)
    if match is None:
        raise ToolError("no tool call found; reply with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>")
    try:
        obj = json.loads(match.group(1))
    except json.JSONDecodeError as exc:
        raise ToolError(f"the tool call is not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ToolError(f"the tool call is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ToolError(f"the tool call is not valid JSON ({_one_line(str(exc), 120)})") from None
    if _depth(obj) > MAX_DEPTH:
        raise ToolError(f"the tool call is nested too deeply (at most {MAX_DEPTH} levels)")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ToolError('the tool call needs a "name" string and an "arguments" object')
    name, args = obj["name"], obj.get("arguments", {})
    if name not in _SCHEMAS:
        raise ToolError(f"unknown tool {name!r}; tools: {', '.join(TOOL_NAMES)}")
    if not isinstance(args, dict):
        raise ToolError(f"{name}: arguments must be an object")
    schema = _SCHEMAS[name]
    for req in schema["required"]:
        if req not in args:
            raise ToolError(f"{name}: missing argument {req!r}")
    for key, value in args.items():
        spec = schema["properties"].get(key)
        if spec is None:
            raise ToolError(f"{name}: unknown argument {key!r}")
        want = _JSON_TYPES[spec["type"]]
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ToolError(f"{name}: {key} must be a {spec['type']}")
        if want is int and not -MAX_INT <= value <= MAX_INT:
            raise ToolError(f"{name}: {key} is out of range (at most {MAX_INT} in size)")
        item = spec.get("items", {}).get("type")
        if want is list and item and not all(isinstance(v, _JSON_TYPES[item]) for v in value):
            raise ToolError(f"{name}: {key} must be an array of {item}s")
    return ToolCall(name, args)


def _depth(obj: Any) -> int:
    """How deeply ``obj`` nests lists and objects (iteratively: it may be deep)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:  # deeper than that is already too deep
                stack.extend((v, level + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def _one_line(text: str, limit: int = MAX_ERROR) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _show(value: str, limit: int = 60) -> str:
    """A model-supplied string in an error: quoted, escaped, short (control characters visible)."""
    return repr(value[:limit] + ("..." if len(value) > limit else ""))


def render_tool_call(call: ToolCall) -> str:
    """The canonical text of a call (what a scripted or constrained model emits)."""
    return f"<tool_call>\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n</tool_call>"


def _bounded(text: str, limit: int = MAX_REPLY) -> str:
    return text if len(text) <= limit else text[: limit - 40] + f"\n... ({len(text) - limit + 40} more characters)"


def first_observation(run: RunResult, locations: list[Location], read: Callable[[str], str | None],
                      *, max_failing: int = 5, max_regions: int = 3, context: int = 2) -> str:
    """Failing test ids, assertion messages, the last frames, the most suspicious regions."""
    failing = run.failing
    out = [f"{len(failing)} failing test{'s' * (len(failing) != 1)} (of {len(run.tests)}):"]
    for nodeid in failing[:max_failing]:
        t = run.tests[nodeid]
        out.append(f"- {nodeid}: {t.summary}")
        for f in t.frames[-3:]:
            out.append(f"    at {f.path}:{f.line} in {f.function}")
    if len(failing) > max_failing:
        out.append(f"- ... {len(failing) - max_failing} more")
    shown = 0
    for loc in locations:
        if shown >= max_regions:
            break
        text = read(loc.path)
        if text is None:
            continue
        lines = text.splitlines()
        lo, hi = max(1, loc.line - context), min(len(lines), loc.end_line + context)
        out.append(f"Suspicious: {loc.path}:{loc.line}" + (f" in {loc.function}" if loc.function else ""))
        out.extend(f"{n:>5}{'>' if loc.line <= n <= loc.end_line else ' '} {lines[n - 1]}"
                   for n in range(lo, hi + 1))
        shown += 1
    return "\n".join(out)


@dataclass
class CandidateInfo:
    """One numbered entry of the ``candidates`` tool: a catalogue edit and what search saw."""

    path: str
    line: int
    description: str
    apply: Callable[[str], str]  # source -> edited source; raises when the source changed
    fixed: int | None = None  # failing tests it fixed when search tried it; None: untried


@dataclass
class ToolResult:
    text: str
    terminal: bool = False


@dataclass
class ToolBox:
    """Carries out tool calls for one episode over a workspace's shadow copy."""

    ws: Workspace
    runner: TestRunner
    failing: list[str]
    candidates: list[CandidateInfo] = field(default_factory=list)
    timeouts: dict[str, float] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)  # current text of files the episode changed
    originals: dict[str, str] = field(default_factory=dict)
    test_runs: int = 0
    spec: Specification | None = None  # what no edit may change (default: from the workspace)
    allow_test_edits: bool = False  # the user's opt-in to fixes of test code
    search_seconds: float = SEARCH_SECONDS
    # What the episode met, for evaluation: calls answered with an error (a failed edit, say),
    # test runs that failed or did not collect, and whether some run had every originally
    # failing test passing with nothing else failing.
    errors: int = 0
    failed_runs: int = 0
    all_passed: bool = False
    # States of the files (``state()``) in which the failing tests ran: run_tests there would
    # say nothing new (the episode loop stops offering it).
    tested: set[int] = field(default_factory=set)
    passed: set[int] = field(default_factory=set)  # those of them where every failing test passed
    # The candidate applied last, while its file still reads as that apply left it:
    # (n, path, text before, text after).  Candidates are alternatives (one edit each), so the
    # next apply takes it back first: a policy that reads a failing result can try another
    # instead of stacking two edits.
    applied: tuple[int, str, str, str] | None = field(default=None, repr=False)
    tried: set[int] = field(default_factory=set)  # candidates applied (and tested) in this episode

    def __post_init__(self) -> None:
        if self.spec is None:
            self.spec = Specification.of_workspace(self.ws, self.failing)

    # -- confinement ----------------------------------------------------------------------
    def _path(self, path: str) -> str:
        if _UNSAFE.search(path):
            raise ToolError(f"{_show(path)}: control characters or invalid text in a path")
        rel = path.strip().replace("\\", "/")
        rel = rel.removeprefix("./")
        try:
            self.ws.check_editable(rel)
        except FrogNanoError as exc:
            raise ToolError(str(exc)) from None
        if rel not in self.ws.entries:
            raise ToolError(f"{path}: no such file in the project")
        return rel

    def _text(self, rel: str) -> str:
        if rel in self.texts:
            return self.texts[rel]
        try:
            return self.ws.read(rel)
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            raise ToolError(f"{rel}: cannot be read as text ({type(exc).__name__})") from None

    def _set(self, rel: str, new: str) -> None:
        self.originals.setdefault(rel, self._text(rel))
        self.texts[rel] = new

    # -- tools ----------------------------------------------------------------------------
    def call(self, call: ToolCall) -> ToolResult:
        try:
            result = getattr(self, f"_tool_{call.name}")(**call.arguments)
        except ToolError as exc:
            result = ToolResult(f"error: {_one_line(str(exc))}")
        except (ValueError, TypeError, OverflowError, RecursionError, OSError) as exc:
            # Arguments no check above foresaw: an error for the model, never a crash of the fix.
            log.info("tool %s failed on its arguments: %r", call.name, exc)
            result = ToolResult(f"error: {call.name}: these arguments cannot be used "
                                f"({type(exc).__name__}: {_one_line(str(exc), 120)})")
        if result.text.startswith("error:"):
            self.errors += 1
        # Replies go back into the model's context (and its tokenizer): valid UTF-8 only.
        result.text = result.text.encode("utf-8", "replace").decode("utf-8")
        return result

    def _tool_read(self, path: str, start: int = 1, end: int | None = None) -> ToolResult:
        rel = self._path(path)
        lines = self._text(rel).splitlines()
        start = max(1, start)
        end = min(len(lines), end if end is not None else start + READ_WINDOW - 1)
        if start > len(lines):
            raise ToolError(f"{rel} has {len(lines)} lines")
        body = "\n".join(f"{n:>5} {lines[n - 1]}" for n in range(start, end + 1))
        return ToolResult(_bounded(f"{rel} lines {start}-{end} of {len(lines)}:\n{body}"))

    def _tool_search(self, pattern: str, path: str | None = None) -> ToolResult:
        try:
            rx = re.compile(pattern)
        except (re.error, OverflowError, RecursionError) as exc:
            rx = re.compile(re.escape(pattern)) if pattern else None
            if rx is None:
                raise ToolError(f"bad pattern: {exc}") from None
        files = [self._path(path)] if path else sorted(self.ws.python_files())
        texts = []
        for rel in files:
            try:
                texts.append((rel, self._text(rel)))
            except ToolError:
                continue
        try:  # in a child process with a deadline: a backtracking pattern must not hang the fix
            found = grep(rx.pattern, texts, limit=31, seconds=self.search_seconds)
        except (GrepTimeout, GrepError) as exc:
            raise ToolError(f"search: {exc}") from None
        hits = [f"{rel}:{n}: {line}" for rel, n, line in found]
        if not hits:
            return ToolResult("no matches")
        more = "\n... more matches; narrow the pattern" if len(hits) > 30 else ""
        return ToolResult(_bounded("\n".join(hits[:30]) + more))

    def _replace(self, rel: str, new_text: str, *, next_step: bool = True) -> ToolResult:
        old_text = self._text(rel)
        assert self.spec is not None
        why = self.spec.reason(rel, old_text, new_text, allow_test_edits=self.allow_test_edits)
        if why:  # first: whatever else is wrong with the edit, this is the rule it breaks
            raise ToolError(why)
        if rel.endswith(".py") and not self.spec.edits_tests([rel]):
            why = reaches_runner(rel, old_text, new_text)
            if why:  # the verifier would refuse the patch too (Verifier.refuses): say so now
                raise ToolError(why)
        if _SURROGATE.search(new_text):
            raise ToolError("the new text holds a lone surrogate, which is not valid Unicode text")
        try:
            compile(new_text, rel, "exec")
        except SyntaxError as exc:
            raise ToolError(f"the edit would break the syntax of {rel}: line {exc.lineno}: {exc.msg}") from None
        except ValueError as exc:  # NUL bytes (before Python 3.12)
            raise ToolError(f"the edit would break {rel}: {exc}") from None
        self._set(rel, new_text)
        diff = "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True),
                                            f"a/{rel}", f"b/{rel}", n=1))
        if not diff:
            return ToolResult("no change")
        # The next step, after the diff: a small model tends to repeat its last call instead
        # (SmolLM2-135M applied the same candidate four times in a row).
        return ToolResult(_bounded(diff) + ("\nChanged. Next: run_tests, or submit if you are sure." if next_step else ""))

    def _tool_edit(self, path: str, old: str, new: str) -> ToolResult:
        rel = self._path(path)
        text = self._text(rel)
        count = text.count(old) if old else 0
        if count == 0:
            raise ToolError(f"old text not found in {rel}; read the file and copy the text exactly")
        if count > 1:
            raise ToolError(f"old text occurs {count} times in {rel}; include more lines to make it unique")
        return self._replace(rel, text.replace(old, new, 1))

    def _tool_candidates(self) -> ToolResult:
        if not self.candidates:
            return ToolResult("no candidates at the suspicious lines")
        n = len(self.failing)
        rows = [f"{i}. {c.path}:{c.line} {c.description}" + (f" (fixed {c.fixed}/{n} in search)" if c.fixed is not None else "")
                for i, c in enumerate(self.candidates, 1)]
        return ToolResult(_bounded("\n".join(rows)))

    def _tool_apply(self, n: int) -> ToolResult:
        """Candidate ``n`` in place of the one applied before (when its file is still as that apply
        left it), then the failing tests: the result says at once whether this candidate is the
        fix, so trying another costs one call (SmolLM2-135M, told only the diff, applied the next
        candidate on top of the last or ran out of turns before its run_tests)."""
        if not 1 <= n <= len(self.candidates):
            raise ToolError(f"no candidate {n}; call candidates first (1..{len(self.candidates)})")
        cand = self.candidates[n - 1]
        back = self.applied if self.applied is not None and self.texts.get(self.applied[1]) == self.applied[3] else None
        if back is not None and back[0] == n:
            raise ToolError(f"candidate {n} is applied already; apply another, or submit")
        base = back[2] if back is not None and back[1] == cand.path else self._text(cand.path)
        try:
            new_text = cand.apply(base)
        except Exception:  # noqa: BLE001 - the file changed under the candidate
            raise ToolError(f"candidate {n} no longer applies: {cand.path} was edited since; use edit") from None
        texts = dict(self.texts)
        if back is not None:
            self.texts[back[1]] = back[2]
        try:
            changed = self._replace(cand.path, new_text, next_step=False)
        except ToolError:
            self.texts = texts
            raise
        self.applied = (n, cand.path, base, new_text)
        self.tried.add(n)
        lines = [changed.text]
        if back is not None:
            lines.append(f"(candidate {back[0]} taken back)")
        try:
            ran = self._tool_run_tests()
        except ToolError as exc:
            lines.append(f"the failing tests: {exc}")
        else:
            lines.append(f"the failing tests: {ran.text}")
            if not self.failing_pass():
                lines.append("Still failing: apply another candidate (it replaces this one), or edit.")
        return ToolResult(_bounded("\n".join(lines)))

    def failing_pass(self) -> bool:
        """Whether the last run of the failing tests, in the files' current state, passed them all."""
        return self.state() in self.passed

    def _selection(self, selection: list[str]) -> list[str]:
        """Test ids and paths inside the project, as pytest can never read as options.

        Everything else is refused: an option (``--junitxml=/abs/file``, ``--basetemp``,
        ``--log-file``, ``--debug=...`` would make pytest write outside the project), an
        ``@file`` (pytest expands those into arguments even after ``--``), control characters,
        and paths that resolve outside the project (``..``, absolute, through a symlink).
        """
        wanted = []
        for raw in selection:
            if not isinstance(raw, str):
                raise ToolError("run_tests: selection must be a list of test ids")
            item = raw.strip()
            usage = "give test ids or paths inside the project, like tests/test_x.py::test_y"
            if _UNSAFE.search(raw) or not item:
                raise ToolError(f"run_tests: {_show(raw)} is not a test id (empty, or control characters); {usage}")
            if item[0] in "-@":
                raise ToolError(f"run_tests: {_show(raw)} is not a test id: options and @files are not "
                                f"accepted; {usage}")
            path, sep, rest = item.partition("::")
            norm = posixpath.normpath(path.replace("\\", "/"))
            real = os.path.realpath(os.path.join(self.ws.root, norm))
            root = str(self.ws.root)
            if (posixpath.isabs(norm) or norm == ".." or norm.startswith("../")
                    or not (real == root or real.startswith(root + os.sep))):
                raise ToolError(f"run_tests: {_show(raw)} is outside the project; {usage}")
            if norm[0] in "-@":  # "./-x.py": pytest would still read the rest as an option
                norm = "./" + norm
            wanted.append(norm + sep + rest)
        return wanted

    def _tool_run_tests(self, selection: list[str] | None = None) -> ToolResult:
        if selection == ["all"]:
            wanted = None
        else:
            wanted = self._selection(selection or self.failing)
        changed = {rel: t for rel, t in self.texts.items() if t != self.originals.get(rel)}
        assert self.spec is not None
        protected = [r for r in self.spec.protected(self.ws.entries) if r not in changed]
        strays = self.spec.strays(self.ws.entries)
        try:
            with self.ws.edited(changed):
                self.ws.ensure_pristine(protected, strays)  # the user's tests, whatever ran before
                run = self.runner.run(wanted, timeouts=self.timeouts)
                rewrote = self.ws.ensure_pristine(protected, strays)
        except (FrogNanoError, OSError) as exc:
            raise ToolError(f"the tests could not run: {_one_line(str(exc))}") from None
        self.test_runs += 1
        good = not run.collect_errors and not run.failing and not rewrote
        if not good:
            self.failed_runs += 1
        elif all(n in run.tests and run.tests[n].passed for n in self.failing):
            self.all_passed = True
        if not selection:  # the failing tests, the run the episode began with
            self.tested.add(self.state())
            if good and run.tests:
                self.passed.add(self.state())
        if run.collect_errors:
            return ToolResult(_bounded("collection error: " + run.collect_errors[0].summary))
        if not run.tests:
            # "0 passed, 0 failed" reads like a success to a weak model; say what to give instead.
            raise ToolError(f"run_tests: no test matches {', '.join(_show(w, 40) for w in (wanted or ['all'])[:3])}; "
                            f"give test ids like {self.failing[0] if self.failing else 'tests/test_x.py::test_y'}, "
                            "or no selection for the failing tests")
        failing = run.failing
        lines = [f"{len(run.tests) - len(failing)} passed, {len(failing)} failed"]
        if rewrote:
            lines.append(f"note: the run rewrote {', '.join(rewrote[:3])}; restored (these results do not count)")
        for nodeid in failing[:5]:
            lines.append(f"- {nodeid}: {run.tests[nodeid].summary}")
        if not good and self.patch() is None and self.candidates:
            # The failure is the one the episode began with; running it again shows nothing new.
            lines.append("Nothing is changed yet: candidates lists likely fixes (apply N), or edit the "
                         "suspicious line.")
        if good and self.patch() is not None:
            # What to do next, said where a small model reads last (SmolLM2-135M otherwise ran
            # the passing tests again until its turns ran out).
            lines.append("The tests pass with your change: submit it.")
        return ToolResult(_bounded("\n".join(lines)))

    def offered(self, names: Sequence[str]) -> list[str]:
        """The tools of ``names`` a call can use now: ``submit`` only once the episode has changed
        a file.  Submitting nothing ends an episode with nothing to show, so it is an action no
        state makes useful; offering it anyway, an untrained policy gave up on two in five of its
        first turns, and training pulled the one ``submit`` choice both ways (away from it
        before an edit, towards it after one).  ``apply`` leaves once the failing tests pass in
        the current state (another candidate would replace the one that passes) or every listed
        candidate has been tried (``untried``; the grammar offers only those).  The in-process
        backends' grammar offers exactly these (invalid-action masking); a server-side model
        that calls ``submit`` early gets the error below and goes on."""
        done = bool(self.candidates) and (self.failing_pass() or not self.untried())
        return [n for n in names if (n != "submit" or self.patch() is not None) and (n != "apply" or not done)]

    def untried(self) -> list[int]:
        """The listed candidates' numbers not yet applied in this episode: one applied before
        got its run of the failing tests, and applying it again would say the same."""
        return [n for n in range(1, len(self.candidates) + 1) if n not in self.tried]

    def _tool_submit(self) -> ToolResult:
        if self.patch() is None:
            raise ToolError("nothing to submit: no file is changed yet; apply a candidate or edit a file first")
        return ToolResult("submitted", terminal=True)

    def state(self) -> int:
        """The episode's files as changed so far: equal states give equal tool results."""
        return hash(tuple(sorted((rel, text) for rel, text in self.texts.items() if text != self.originals.get(rel))))

    # -- the result -----------------------------------------------------------------------
    def patch(self) -> Patch | None:
        edits = tuple(FileEdit(rel, self.originals[rel], text) for rel, text in sorted(self.texts.items())
                      if text != self.originals[rel])
        return Patch(edits) if edits else None
