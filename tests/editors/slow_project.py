"""A project whose fix takes long: the editor tests' check that frognano.fix never blocks.

tests/server/test_server.py's ``SLOW`` with a pyproject.toml (the editors' root marker): its
one test sleeps 1.5 s and can never pass, so the search tries every candidate (56 single edits
and 143 pairs, about 160 s on a 16-core machine) and finds nothing.  The editor tests do not
wait for it: they check that the command answers at once and that the job reports progress,
then cancel it or end the session.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import write_project

SLOW_PROJECT = {
    "pyproject.toml": '''
        [project]
        name = "slow"
        version = "0.0.0"
    ''',
    "slow/__init__.py": "",
    "slow/core.py": '''
        def compute(a=1, b=2):
            total = a + b
            if total > 2:
                total = total * 2 - a
            return [total, a, b]
    ''',
    "tests/test_core.py": '''
        import time

        from slow.core import compute


        def test_compute():
            time.sleep(1.5)
            assert compute() == "impossible"
    ''',
}
SLOW_FILE = "slow/core.py"
# A command answer slower than this is a blocking command (eglot gives up after 10 s).
ANSWER_S = 1.0


def slow_project(root: Path) -> Path:
    """Write the slow project at ``root``; returns it."""
    return write_project(root, SLOW_PROJECT)


def leftover_processes(folder: Path, wait: float = 5.0) -> list[str]:
    """Processes still running in or on ``folder`` (their working directory or command line
    names it: the server, its pytest runs in the project or in shadow copies under the test's
    cache), after waiting up to ``wait`` seconds for them to go.  Linux (/proc); elsewhere []."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    mark = str(folder)
    deadline = time.monotonic() + wait
    while True:
        found = []
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                cwd = os.readlink(entry / "cwd")
                state = next((line.split()[1] for line in (entry / "status").read_text().splitlines()
                              if line.startswith("State:")), "?")
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if state != "Z" and (mark in cmdline or cwd == mark or cwd.startswith(mark + os.sep)):
                found.append(f"{entry.name} (cwd {cwd}): {cmdline[:300]}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
