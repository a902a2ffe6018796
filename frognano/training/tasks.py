"""Task files for evaluation and training: FrogNano's ``synth`` output and SWE-style rows.

A task names a repository, the clean tree (``base_commit``: a git commit, or with ``base_kind``
"content" the content hash ``synth`` records outside git), the bug (``patch``, applied to the
clean tree) and the tests that judge a fix (``FAIL_TO_PASS``, ``PASS_TO_PASS``).  Those are the
fields FrogNano's tasks share with SWE-smith and SWE-bench instances; the rest is optional:

* ``family`` (FrogNano's ``operator-bN-hint-dN``; "unknown" when absent) groups the metrics;
* ``hint``, when present, is shown to the model with the failure, as in training;
* a SWE-bench row (one with ``test_patch``) is buggy at ``base_commit`` already: its
  ``test_patch`` (the tests that catch the bug) is applied, and its ``patch`` (the reference
  fix) is not;
* ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` may be JSON-encoded strings, as SWE-bench ships them.

A malformed row is named by line number and skipped (``load_tasks`` returns the problems);
the other rows load.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

__all__ = ["EvalTask", "load_tasks"]

_HEX = re.compile(r"[0-9a-f]{7,64}")


@dataclass(frozen=True)
class EvalTask:
    instance_id: str
    repo: str
    base_commit: str  # "" when the row names none (then the tree is used as it is)
    base_kind: str  # "git" | "content"
    patch: str  # applied to the clean tree to make it buggy ("" for none)
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    family: str = "unknown"
    hint: str = ""
    line: int = 0  # line of the task file it came from
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _tests(row: dict, name: str) -> tuple[str, ...]:
    value = row.get(name, [])
    if isinstance(value, str):  # SWE-bench ships these as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"{name} is a string but not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(t, str) and t.strip() for t in value):
        raise ValueError(f"{name} must be a list of test ids")
    return tuple(value)


def parse_row(row: Any, line: int = 0) -> EvalTask:
    """One task from one decoded JSON row; ``ValueError`` says what is wrong with it."""
    if not isinstance(row, dict):
        raise ValueError(f"a task is a JSON object, not {type(row).__name__}")
    for name in ("instance_id", "repo"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ValueError(f"{name} is missing or not a string")
    base = row.get("base_commit", "")
    if not isinstance(base, str) or (base and not _HEX.fullmatch(base.strip().lower())):
        raise ValueError(f"base_commit must be a hex commit or content hash, got {base!r}")
    kind = row.get("base_kind", "git")
    if kind not in ("git", "content"):
        raise ValueError(f"base_kind must be git or content, got {kind!r}")
    swe_bench = "test_patch" in row and "family" not in row
    patch = row.get("test_patch" if swe_bench else "patch", "")
    if not isinstance(patch, str):
        raise ValueError("patch must be a string (a unified diff)")
    f2p = _tests(row, "FAIL_TO_PASS")
    if not f2p:
        raise ValueError("FAIL_TO_PASS names no test: a task needs a failing test")
    p2p = _tests(row, "PASS_TO_PASS")
    family = row.get("family") or "unknown"
    hint = row.get("hint") or ""
    if not isinstance(family, str) or not isinstance(hint, str):
        raise ValueError("family and hint must be strings")
    known = {"instance_id", "repo", "base_commit", "base_kind", "patch", "FAIL_TO_PASS",
             "PASS_TO_PASS", "family", "hint"}
    return EvalTask(row["instance_id"].strip(), row["repo"].strip(), base.strip().lower(), kind, patch,
                    f2p, tuple(t for t in p2p if t not in f2p), family, hint, line,
                    {k: v for k, v in row.items() if k not in known})


def load_tasks(path: Path) -> tuple[list[EvalTask], list[str]]:
    """(tasks, problems): every well-formed row of a JSON-lines file, and one line naming each
    row that is not (``path:LINE: why``).  A repeated ``instance_id`` keeps its first row."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the task file ({exc.strerror or exc})") from None
    tasks: list[EvalTask] = []
    problems: list[str] = []
    seen: set[str] = set()
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            task = parse_row(json.loads(line.decode("utf-8")), n)
        except UnicodeDecodeError:
            problems.append(f"{path}:{n}: not UTF-8 text")
            continue
        except ValueError as exc:  # json's errors are ValueErrors too
            problems.append(f"{path}:{n}: {' '.join(str(exc).split())[:200]}")
            continue
        if task.instance_id in seen:
            problems.append(f"{path}:{n}: instance_id {task.instance_id} repeats an earlier row")
            continue
        seen.add(task.instance_id)
        tasks.append(task)
    return tasks, problems
