"""Line search with a deadline, for the harness's ``search`` tool.

A model's regular expression is untrusted input.  Python's ``re`` backtracks: ``^(a+)+$``
against a line of forty ``a`` and a ``!`` runs for longer than anyone waits, and it holds the
GIL all the while, so nothing in this process can stop it (a thread cannot be interrupted, and
signals reach only the main thread, while the language server runs fixes in worker threads).
So the matching runs in a child interpreter, killed at the deadline.  The child gets the texts
on stdin (the episode's unsaved edits included), uses only the standard library, and answers
with JSON.  Starting it costs tens of milliseconds, small beside a model's turn.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable

SECONDS = 5.0  # the deadline of one search, interpreter start included
LINE = 300  # characters of a matching line sent back

_CHILD = r"""
import json, re, sys
try:  # a pattern may also try to eat memory: 1 GiB of address space is plenty for a grep
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
except (ImportError, ValueError, OSError):
    pass
req = json.loads(sys.stdin.read())
rx = re.compile(req["pattern"])
hits = []
for rel, text in req["files"]:
    for n, line in enumerate(text.splitlines(), 1):
        if rx.search(line):
            hits.append([rel, n, line.strip()[:req["width"]]])
            if len(hits) >= req["limit"]:
                break
    if len(hits) >= req["limit"]:
        break
sys.stdout.write(json.dumps(hits))
"""


class GrepTimeout(Exception):
    """The pattern took longer than the deadline (catastrophic backtracking, most likely)."""


class GrepError(Exception):
    """The child could not run the search (the message is one line)."""


def grep(pattern: str, files: Iterable[tuple[str, str]], *, limit: int = 31,
         seconds: float = SECONDS) -> list[tuple[str, int, str]]:
    """(path, line number, stripped line) of the first ``limit`` lines matching ``pattern``."""
    payload = json.dumps({"pattern": pattern, "files": [list(f) for f in files],
                          "limit": limit, "width": LINE})
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", _CHILD], input=payload.encode("ascii"),
                              capture_output=True, timeout=seconds, check=False)
    except subprocess.TimeoutExpired:
        raise GrepTimeout(f"the pattern took longer than {seconds:g} s (nested repetition such as "
                          "(a+)+ backtracks); use a simpler pattern") from None
    except OSError as exc:
        raise GrepError(f"the search could not start ({exc.strerror or exc})") from None
    if proc.returncode != 0:
        last = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise GrepError(f"the search failed: {last[0][:200]}")
    return [(rel, int(n), line) for rel, n, line in json.loads(proc.stdout)]
