"""The tool protocol a model repairs with: prompts, tool schemas, observations, tool execution.

This module is what training and serving share (DESIGN.md invariant 3): the language server,
``frognano fix --model`` and the RL environment all build episodes from it, so a prompt or an
observation format changes here or nowhere.

Tool calls use the Qwen form the chat templates render::

    <tool_call>
    {"name": "edit", "arguments": {"path": "calc/stats.py", "old": "age > 18", "new": "age >= 18"}}
    </tool_call>

Every file access goes through ``ToolBox._path``: relative paths inside the project only, no
``..``, no absolute paths, nothing through a symlink that leaves it.  Edits live in the
episode's own copy of the texts and reach the shadow only for ``run_tests``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import FrogNanoError
from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
from ..sandbox.workspace import Workspace
from .localize import Location
from .patch import FileEdit, Patch

SYSTEM_PROMPT = """\
You fix Python code so that the failing pytest tests pass without breaking the others.
You work on a copy of the project through tools. Reply with exactly one tool call:
<tool_call>
{"name": "<tool>", "arguments": {...}}
</tool_call>
Change source files, not tests. `candidates` lists likely one-token fixes and `apply` applies one.
After an edit, `run_tests`; when the failing tests pass, `submit`."""


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
    _tool("apply", "Apply candidate number n from `candidates`.", {"n": {"type": "integer"}}, ["n"]),
    _tool("submit", "Finish: the edits so far are the fix.", {}, []),
]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]
_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
_JSON_TYPES = {"string": str, "integer": int, "array": list, "object": dict, "boolean": bool}

READ_WINDOW = 40  # lines shown by read() without an explicit end
MAX_REPLY = 3000  # characters of any tool reply


class ToolError(Exception):
    """A tool call that cannot be carried out; the message goes back to the model."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def key(self) -> str:
        return json.dumps([self.name, self.arguments], sort_keys=True)


_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def parse_tool_call(text: str) -> ToolCall:
    """The first tool call in a reply; ToolError (one line) when there is none or it is malformed."""
    match = _CALL.search(text)
    if match is None:
        raise ToolError("no tool call found; reply with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>")
    try:
        obj = json.loads(match.group(1))
    except json.JSONDecodeError as exc:
        raise ToolError(f"the tool call is not valid JSON ({exc.msg} at column {exc.colno})") from None
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
    return ToolCall(name, args)


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

    # -- confinement ----------------------------------------------------------------------
    def _path(self, path: str) -> str:
        rel = path.strip().replace("\\", "/")
        if rel.startswith("./"):
            rel = rel[2:]
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
            return getattr(self, f"_tool_{call.name}")(**call.arguments)
        except ToolError as exc:
            return ToolResult(f"error: {exc}")

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
        except re.error as exc:
            rx = re.compile(re.escape(pattern)) if pattern else None
            if rx is None:
                raise ToolError(f"bad pattern: {exc}") from None
        files = [self._path(path)] if path else sorted(self.ws.python_files())
        hits = []
        for rel in files:
            try:
                text = self._text(rel)
            except ToolError:
                continue
            hits.extend(f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                        if rx.search(line))
            if len(hits) > 30:
                break
        if not hits:
            return ToolResult("no matches")
        more = "\n... more matches; narrow the pattern" if len(hits) > 30 else ""
        return ToolResult(_bounded("\n".join(hits[:30]) + more))

    def _replace(self, rel: str, new_text: str) -> ToolResult:
        old_text = self._text(rel)
        try:
            compile(new_text, rel, "exec")
        except SyntaxError as exc:
            raise ToolError(f"the edit would break the syntax of {rel}: line {exc.lineno}: {exc.msg}") from None
        self._set(rel, new_text)
        diff = "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True),
                                            f"a/{rel}", f"b/{rel}", n=1))
        return ToolResult(_bounded(diff or "no change"))

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
        if not 1 <= n <= len(self.candidates):
            raise ToolError(f"no candidate {n}; call candidates first (1..{len(self.candidates)})")
        cand = self.candidates[n - 1]
        try:
            new_text = cand.apply(self._text(cand.path))
        except Exception:  # noqa: BLE001 - the file changed under the candidate
            raise ToolError(f"candidate {n} no longer applies: {cand.path} was edited since; use edit") from None
        return self._replace(cand.path, new_text)

    def _tool_run_tests(self, selection: list[str] | None = None) -> ToolResult:
        if selection == ["all"]:
            wanted = None
        else:
            wanted = [s for s in (selection or self.failing) if isinstance(s, str)]
            if any(".." in s or s.startswith("/") for s in wanted):
                raise ToolError("test ids are relative to the project, like tests/test_x.py::test_y")
        changed = {rel: t for rel, t in self.texts.items() if t != self.originals.get(rel)}
        try:
            with self.ws.edited(changed):
                run = self.runner.run(wanted, timeouts=self.timeouts)
        except (FrogNanoError, OSError) as exc:
            raise ToolError(f"the tests could not run: {exc}") from None
        self.test_runs += 1
        if run.collect_errors:
            return ToolResult(_bounded("collection error: " + run.collect_errors[0].summary))
        failing = run.failing
        lines = [f"{len(run.tests) - len(failing)} passed, {len(failing)} failed"]
        for nodeid in failing[:5]:
            lines.append(f"- {nodeid}: {run.tests[nodeid].summary}")
        return ToolResult(_bounded("\n".join(lines)))

    def _tool_submit(self) -> ToolResult:
        return ToolResult("submitted", terminal=True)

    # -- the result -----------------------------------------------------------------------
    def patch(self) -> Patch | None:
        edits = tuple(FileEdit(rel, self.originals[rel], text) for rel, text in sorted(self.texts.items())
                      if text != self.originals[rel])
        return Patch(edits) if edits else None
