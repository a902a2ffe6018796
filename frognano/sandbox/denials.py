"""Which writes the OS sandbox refused a run's tests, and the one line that tells the user.

A test that fails because it may not write outside the shadow copy looks like any other failure;
naming the path, the tests that tried and the ``sandbox_writable`` setting that would allow it
turns it into something the user can act on.
"""

from __future__ import annotations

import json
import os
import re

from .results import RunResult

# "[Errno 13] Permission denied: '/path'" (Landlock), errno 1 (Seatbelt), 30 (read-only file
# system); for a rename, "'src' -> 'dst'" names the destination.
_DENIED_MESSAGE = re.compile(r"\[Errno (?:1|13|30)\] [^:\n]+: '([^'\n]+)'(?: -> '([^'\n]+)')?")


def denied_writes(run: RunResult, roots: list[str]) -> dict[str, list[str]]:
    """Paths outside ``roots`` (real paths the tests may write) that ``run``'s failing tests (or
    its collection) could not write because of the sandbox, each with the failing tests that tried.

    From the worker's audit hook (writes by Python code) and from the failure messages
    ("[Errno 13] Permission denied: '/path'", from any program); a path counts only where
    FrogNano itself may write, so that the sandbox, not the file's mode, refused.
    """
    if not run.confinement:
        return {}
    failing = set(run.failing)
    found: dict[str, list[str]] = {}

    def add(path: str, test: str) -> None:
        if not os.path.isabs(path) or _inside(os.path.realpath(path), roots) or not _may_write(path):
            return
        tests = found.setdefault(path, [])
        if test and test not in tests:
            tests.append(test)

    for path, test in run.denied.items():
        if test in failing or (not test and run.collect_errors):
            add(path, test)
    texts = [(n, run.tests[n].message) for n in run.failing] + [("", e.message) for e in run.collect_errors]
    for test, text in texts:
        for m in _DENIED_MESSAGE.finditer(text):
            add(m.group(2) or m.group(1), test)
    return found


def denial_note(denied: dict[str, list[str]]) -> str | None:
    """One line naming what the sandbox ``denied`` (see ``denied_writes``) and the setting that
    allows it; None when nothing was denied."""
    if not denied:
        return None
    paths = sorted(denied)
    tests = sorted({t for ts in denied.values() for t in ts})
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    who = ""
    if tests:
        who = f" ({tests[0]}{f' and {len(tests) - 1} more' if len(tests) > 1 else ''} failing)"
    allow = sorted({p if os.path.isdir(p) else os.path.dirname(p) for p in paths})
    return (f"the sandbox denied writing outside the shadow copy: {shown}{who}; if the tests "
            f"need it, allow it with [tool.frognano] sandbox_writable = {json.dumps(allow)}")


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _may_write(path: str) -> bool:
    """Whether FrogNano (unconfined) may write ``path``: the file, or its nearest existing folder."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.access(probe, os.W_OK)


# What a confined test gets for a refused call: EACCES (Landlock: a write outside, a TCP bind or
# connect) or EPERM (seccomp, the namespaces).
_REFUSED = re.compile(r"^(PermissionError|OSError): \[Errno (1|13)\] (Operation not permitted|Permission denied)")


def refused_tests(messages: dict[str, str], confinement: str | None, explained: set[str] = frozenset()) -> list[str]:
    """The failing tests (of ``messages``: node id -> the failure's first line) whose failure is
    a call the confinement refused, leaving out those in ``explained``; none when unconfined."""
    if not confinement:
        return []
    return sorted(n for n, text in messages.items() if n not in explained and _REFUSED.match(text))


def refusal_note(messages: dict[str, str], confinement: str, explained: set[str]) -> str | None:
    """One line for failing tests that ended in a refused call under confinement that the write
    probe did not explain (``messages``: node id -> the failure's first line; ``explained``: the
    tests the write note names).  The commonest is a socket (a test that starts a local server:
    ``server_bind`` raises it); the search's "none of the N edits passed" never said so."""
    refused = refused_tests(messages, confinement, explained)
    if not refused:
        return None
    more = f" and {len(refused) - 1} more" if len(refused) > 1 else ""
    return (f"{refused[0]}{more} failed on a call the sandbox refused ({messages[refused[0]].split(':')[0]}): "
            "confined tests get no network, not even a local server, and write only in the shadow copy; "
            'if they need either, run them unconfined with [tool.frognano] sandbox = "off"')
