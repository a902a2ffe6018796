"""Whole-suite runs with per-test line coverage, kept per source state for other commands to reuse.

The coverage map is the most expensive thing FrogNano computes about a project (a whole-suite
run under a line tracer).  Within one process the incremental session keeps it current
(``repair/incremental.py``: the server, watch mode and evaluation); across commands this store
keeps it per *source state*, so ``frognano synth`` on a repository and a later ``frognano
eval`` of its tasks build it once: synthesis saves its clean baseline here, and evaluation's
environment starts its session from it instead of running the suite again.

A state is every file the shadow copy holds (paths, bytes, symlink targets, the editor
overlay), the interpreter that runs the tests, and the pytest arguments (``--assert=plain``
aside: assertion rewriting changes failure messages, never outcomes or which lines run), and
FrogNano's version.  A stored run is a green-or-not whole-suite run whose collection worked,
in the worker's own results format (``results.parse_results`` reads it back).  At most
``KEEP`` states are kept per project, the least recently used going first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

from .results import RunResult, parse_results
from .runner import RunnerConfig, find_python
from .workspace import Workspace

__all__ = ["KEEP", "Pictures", "state_key"]

log = logging.getLogger(__name__)

KEEP = 8
_IRRELEVANT_ARGS = frozenset({"--assert=plain", "--assert=rewrite"})


def state_key(ws: Workspace, config: RunnerConfig) -> str:
    """The identity of what a whole-suite run of ``ws`` would see (module docstring)."""
    from .. import __version__

    h = hashlib.sha256()
    overlay = ws.overlay
    for rel in sorted(ws.entries):
        entry = ws.entries[rel]
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if rel in overlay:
            h.update(b"O" + overlay[rel].encode("utf-8", "surrogatepass"))
        elif entry.link is not None:
            h.update(b"L" + entry.link.encode("utf-8", "surrogateescape"))
        else:
            try:
                h.update(b"F" + (ws.root / rel).read_bytes())
            except OSError:
                h.update(b"?")
        h.update(b"\0")
    python = os.path.realpath(find_python(ws.root, config.python))
    args = [a for a in config.test_args if a not in _IRRELEVANT_ARGS]
    h.update(json.dumps([python, args, __version__]).encode())
    return h.hexdigest()


class Pictures:
    """The store of one project (under its cache folder)."""

    def __init__(self, ws: Workspace) -> None:
        self.folder = ws.cache / "pictures"

    def load(self, key: str) -> RunResult | None:
        path = self.folder / f"{key}.jsonl"
        if not path.is_file():
            return None
        run, running = parse_results(path)
        if running is not None or run.exitstatus is None or run.collect_errors or not run.tests or any(
                t.coverage is None for t in run.tests.values()):
            log.info("ignoring an incomplete stored run %s", path.name)
            return None
        os.utime(path)  # recently used
        return run

    def save(self, key: str, run: RunResult) -> bool:
        """Keep ``run`` (a whole-suite run with line coverage) for the state ``key``; False when
        it is not such a run (collection failed, cancelled, no coverage)."""
        if run.cancelled or run.collect_errors or not run.tests or run.exitstatus is None or any(
                t.coverage is None for t in run.tests.values()):
            return False
        records = [{"kind": "collected", "nodeids": list(run.collected or run.tests)}]
        if run.confinement is not None:
            records.append({"kind": "sandbox", "confined": run.confinement, "reason": run.unconfined})
        for t in run.tests.values():
            records.append({"kind": "result", "nodeid": t.nodeid, "outcome": t.outcome, "duration": t.duration,
                            "message": t.message, "stdout": t.stdout, "stderr": t.stderr,
                            "frames": [{"path": f.path, "line": f.line, "function": f.function} for f in t.frames],
                            "coverage": t.coverage, "last": list(t.last) if t.last else None})
        records.append({"kind": "end", "exitstatus": run.exitstatus, "leaks": list(run.leaks)})
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{key}.jsonl"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        os.replace(tmp, path)  # whole or not at all
        self._prune()
        return True

    def _prune(self) -> None:
        stored = sorted(self.folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in stored[KEEP:]:
            old.unlink(missing_ok=True)
