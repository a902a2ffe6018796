"""What a failed collection is called: the named error a face shows in one line.

pytest reports a broken import against the test module it was collecting, but the user has to
look elsewhere: a ``SyntaxError`` names the source file and line that does not parse, and a
``ModuleNotFoundError`` usually means the tests run under an interpreter that lacks the
project's dependencies (the ``python`` setting picks the right one).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ProjectError
from ..sandbox.results import CollectError, RunResult

# pytest's "E" lines of a SyntaxError raised while importing: '  File "/x/calc/stats.py", line 15'
_SYNTAX_AT = re.compile(r'^E\s+File "(?P<path>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
_MISSING = re.compile(r"ModuleNotFoundError: No module named '(?P<name>[^']+)'")


def collect_error(root: Path, run: RunResult, python: str | None = None) -> ProjectError:
    """The named error of a run whose collection failed (the first error, and how many more).

    ``python`` is the interpreter the tests ran under, named in the hint for a missing module.
    """
    first = run.collect_errors[0]
    more = f" (and {len(run.collect_errors) - 1} more)" if len(run.collect_errors) > 1 else ""
    syntax = _syntax_location(root, first)
    if syntax is not None:
        return ProjectError(f"{syntax}: {first.summary}{more} (while collecting {first.nodeid or 'the tests'})")
    if first.path:  # a conftest.py raised at import: name the project's own file
        message = f"cannot import {root / first.path}: {first.summary}{more}"
    else:
        where = f" {first.nodeid}" if first.nodeid else ""
        message = f"cannot collect{where}: {first.summary}{more}"
    # The last one: an earlier ``No module named`` in a chained traceback is one the project
    # handled (``try: import ujson except ImportError: ...``); the last is what stopped the import.
    missing = _MISSING.findall(first.message)
    if missing:
        under = f" under {python}" if python else ""
        message += (f"; hint: the tests run{under}, which lacks {missing[-1].split('.')[0]}: "
                    "set python = \"path/to/the/project's/python\" in [tool.frognano] "
                    "(or FROGNANO_PYTHON), or install it there")
    return ProjectError(message)


def _syntax_location(root: Path, error: CollectError) -> str | None:
    """``path:line`` (relative to ``root`` when inside it) of the file that does not parse."""
    if "SyntaxError" not in error.summary and "IndentationError" not in error.summary \
            and "TabError" not in error.summary:
        return None
    found = _SYNTAX_AT.findall(error.message)
    if not found:
        return None
    path, line = found[-1]  # the innermost: the module that failed to compile
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    if real == base or real.startswith(base + os.sep):
        path = os.path.relpath(real, base)
    return f"{path}:{line}"
