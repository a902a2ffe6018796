"""The controller's side of the warm fork server: start it, speak its line protocol, run on it.

The server (``frognano_worker serve``) pre-imports the project's third-party dependencies once and
forks a fresh child for every run, so a run skips those imports.  It speaks one JSON object per
line: the controller sends the preimport list, then one request per run; the server answers
"ready", then for each run the child's pid and, once it is done, its return code.  Anything that
breaks this conversation raises ``ServerLost``, and the runner falls back to a fresh process per
run (``TestRunner._run_once``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .preimport import project_top_names, third_party_modules
from .process import POLL, WORKER_DIR, Watch, describe_exit, kill_run, killpg, worker_env
from .workspace import Workspace

if TYPE_CHECKING:
    from .runconfig import RunnerConfig

log = logging.getLogger(__name__)

KILL_GRACE = 30.0  # seconds the fork server gets to report a run the watchdog killed
EXIT_FALLBACK = 75  # a session's run that needs a re-import (frognano_session.EXIT_FALLBACK)


class ServerLost(Exception):
    """The warm server stopped answering, or answered what it should not have."""


class WarmServerClient:
    """What ``TestRunner`` does with its warm server (a mixin: the runner supplies ``ws``,
    ``python``, ``dir`` and ``config``; the state below is set by ``_init_server``)."""

    ws: Workspace
    python: str
    dir: Path
    config: RunnerConfig

    def _init_server(self, enabled: bool) -> None:
        self._unread = b""  # bytes read from the fork server past the last full line
        self._server: subprocess.Popen | None = None
        self._server_failed = not enabled
        self.warm_reason = "disabled" if not enabled else ""
        self._session: int | None = None  # the warm session's pid
        self._session_key: object = None  # the source state it collected (see _state_key)
        self._session_failed = ""  # why this state cannot have a session (until it changes)
        self._key_of: object = None  # the ws.entries that ``_key`` was computed from
        self._key: object = None
        self.session_runs = self.session_fallbacks = self.sessions = 0

    @property
    def warm(self) -> bool:
        return self._server is not None

    def _start_server(self) -> None:
        shadow = self.ws.shadow
        assert shadow is not None
        preimport = third_party_modules(self.ws.root, self.ws.python_files())
        errlog = open(self.dir / "server.log", "wb")  # noqa: SIM115 - owned by the server
        try:
            proc = subprocess.Popen(
                [self.python, "-m", "frognano_worker", "serve"],
                cwd=str(WORKER_DIR), env=worker_env(), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=errlog,
            )
        except OSError as exc:
            raise UsageError(f"cannot start {self.python}: {exc}") from exc
        finally:
            errlog.close()
        roots = [str(self.ws.root), str(shadow)]
        self._server = proc
        self._unread = b""
        try:
            self._send({"preimport": preimport, "roots": roots, "cwd": str(shadow),
                        "own": sorted(project_top_names(self.ws.python_files(), self.ws.root))})
            ready = self._receive(self.config.collect_timeout)
        except ServerLost as exc:
            self._abandon_server(f"the warm server did not start ({exc})")
            return
        if ready.get("offenders"):
            self._abandon_server("pre-importing dependencies imported the project's own modules: "
                                 + ", ".join(ready["offenders"][:5]))
            return
        if ready.get("left_out"):
            log.info("not pre-imported, since importing them imports the project's own modules "
                     "(each run imports them itself): %s", "; ".join(
                         f"{name} ({', '.join(mods)})" for name, mods in sorted(ready["left_out"].items())))
        if ready.get("installed"):
            log.info("an installed copy of the project was imported by its dependencies (%s); "
                     "each run forgets it", ", ".join(ready["installed"][:5]))
        if ready.get("failed"):
            log.info("not pre-imported: %s", ", ".join(sorted(ready["failed"])))
        log.debug("warm server %s ready; pre-imported %d modules", ready.get("pid"), len(ready["imported"]))

    def _abandon_server(self, reason: str) -> None:
        log.info("%s; running each test batch in a fresh process", reason)
        self._stop_server()
        self._server_failed, self.warm_reason = True, reason

    def _stop_server(self) -> None:
        self._session = None  # it dies with the server
        server, self._server = self._server, None
        if server is None:
            return
        with contextlib.suppress(OSError, ValueError):
            server.stdin.write(b'{"cmd": "exit"}\n')  # type: ignore[union-attr]
            server.stdin.flush()  # type: ignore[union-attr]
        # The end of its stdin also stops a run in flight, with all it started; a SIGKILL (below)
        # would leave that run's daemons to init.
        with contextlib.suppress(OSError, ValueError):
            server.stdin.close()  # type: ignore[union-attr]
        try:
            server.wait(timeout=2)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    def _send(self, obj: dict) -> None:
        assert self._server is not None and self._server.stdin is not None
        try:
            self._server.stdin.write(json.dumps(obj).encode() + b"\n")
            self._server.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ServerLost(f"cannot write to it: {exc}") from exc

    def _receive(self, timeout: float | None, watch: Watch | None = None, pid: int | None = None) -> dict:
        """Read one JSON line from the server; with a watch, kill the run's group when it hangs."""
        assert self._server is not None and self._server.stdout is not None
        # Lines are split here, from raw reads: a buffered readline() may pull the next line
        # (the run's end, when it is quick) into its buffer, where select() never sees it.
        fd = self._server.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        killed_at: float | None = None
        while True:
            if b"\n" in self._unread:
                line, _, self._unread = self._unread.partition(b"\n")
                return json.loads(line)
            ready, _, _ = select.select([fd], [], [], POLL)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ServerLost(f"it exited ({describe_exit(self._server.poll())})")
                self._unread += chunk
                continue
            if deadline is not None and time.monotonic() > deadline:
                raise ServerLost(f"no answer in {timeout:g} s")
            if watch is not None and pid is not None and not watch.killed and watch.overdue():
                kill_run(pid)
                watch.killed, killed_at = True, time.monotonic()
            if killed_at is not None and time.monotonic() - killed_at > KILL_GRACE:
                raise ServerLost(f"no answer {KILL_GRACE:g} s after its run was killed")

    def _run_warm(self, req: dict, watch: Watch) -> tuple[bool, int | None]:
        self._send(req)
        pid = self._receive(30.0)["pid"]
        try:
            done = self._receive(None, watch, pid)
        finally:
            killpg(pid)  # whatever the tests spawned and left behind goes with the run
        return watch.killed, done["returncode"]


    # -- the warm session: collect once, swap per run ---------------------------------------
    def _state_key(self) -> object:
        """What a session's collection depends on beyond function bodies it can swap: the set of
        Python files, and every other file's size and time (data, configuration)."""
        entries = self.ws.entries  # a new dict at every sync: computed once per sync, not per run
        if self._key_of is not entries:
            self._key_of, self._key = entries, (
                tuple(sorted(rel for rel in entries if rel.endswith(".py"))),
                tuple(sorted((rel, e.size, e.mtime_ns) for rel, e in entries.items() if not rel.endswith(".py"))))
        return self._key

    def _ensure_session(self, base: dict) -> bool:
        """A session for the current source state (started when there is none); False when the
        state cannot have one (collection errors, a conftest that exits, no tests)."""
        key = self._state_key()
        if self._session is not None and self._session_key == key:
            return True
        if self._session_failed and self._session_key == key:
            return False
        if self._session is not None:
            self._end_session()
        self._session_key, self._session_failed = key, ""
        req = {**base, "nodeids": [], "results": str(self.dir / "session-results.jsonl"),
               "log": str(self.dir / "session.txt"), "limits": {}, "coverage": False, "timeouts": {}}
        Path(req["results"]).unlink(missing_ok=True)
        started = time.monotonic()
        ready: dict = {}
        try:
            with self.ws.pristine():  # collected without a candidate's edit, which is then swapped in
                self._send({"cmd": "session", "req": req})
                self._session = self._receive(30.0)["session"]
                ready = self._receive(self.config.collect_timeout)
        except ServerLost as exc:
            if self._session is not None and "no answer" in str(exc):
                kill_run(self._session)  # a collection that hangs: the server then answers
                with contextlib.suppress(ServerLost):
                    ready = self._receive(KILL_GRACE)
            else:
                raise
        if not ready.get("ready"):
            self._session = None
            self._session_failed = ready.get("reason") or (
                f"{ready.get('errors', 0)} collection errors" if ready.get("errors") else "no tests collected")
            log.info("no warm session for this state: %s", self._session_failed)
            return False
        self.sessions += 1
        log.debug("warm session %s: %s items from %s modules collected in %.2f s", self._session,
                  ready.get("items"), ready.get("modules"), time.monotonic() - started)
        return True

    def _base_swappable(self, req: dict) -> bool:
        """Whether the session can still serve the project without the candidate's edit (its
        fallback was the candidate's, not a change the user made since the session began): an
        empty run of the pristine shadow tells."""
        probe = {**req, "nodeids": [], "results": str(self.dir / "probe-results.jsonl")}
        with self.ws.pristine():
            self._send({"cmd": "srun", "req": probe})
            first = self._receive(30.0)
            if first.get("lost"):
                self._session = None
                return False
            done = self._receive(30.0)
        Path(probe["results"]).unlink(missing_ok=True)
        return done.get("returncode") != EXIT_FALLBACK

    def _end_session(self) -> None:
        if self._session is None:
            return
        self._session = None
        with contextlib.suppress(ServerLost):
            self._send({"cmd": "end_session"})
            self._receive(30.0)

    def _run_session(self, req: dict, watch: Watch) -> tuple[bool, int | None] | None:
        """Run ``req`` in the warm session; None when it must run the ordinary way (the edit
        needs a re-import, or the session is gone)."""
        if not self._ensure_session(req):
            return None
        self._send({"cmd": "srun", "req": req})
        first = self._receive(30.0)
        if first.get("lost"):
            self._session = None
            return None
        pid = first["pid"]
        try:
            done = self._receive(None, watch, pid)
        finally:
            killpg(pid)
        if done.get("lost"):
            self._session = None
            return None
        if "returncode" not in done:
            raise ServerLost(f"unexpected answer from the warm session: {done}")
        if done["returncode"] == EXIT_FALLBACK and not watch.killed:
            self.session_fallbacks += 1
            if not self.ws.editing or not self._base_swappable(req):
                # The project itself changed beyond a swap: collect it again, next time.
                self._end_session()
                self._session_key = None
            return None
        self.session_runs += 1
        return watch.killed, done["returncode"]
