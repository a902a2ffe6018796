"""Bounded output for one test run: file descriptors 1 and 2 become pipes drained by a thread.

pytest's own capture (``--capture=fd``) sends a test's output to a temporary file and reads it
back whole: a test that prints 300 MB then fails with "File too large" (the run's
RLIMIT_FSIZE), or costs that much memory and lands in the run log in full.  Here nothing grows
with the output:

* the run log (``log-N.txt``, what the controller shows when a run cannot start) keeps the
  first ``HEAD`` and the last ``TAIL`` bytes, with a line saying how much was left out;
* each test's stdout and stderr keep their last ``limit`` bytes (the plugin takes them after
  each phase, see ``take``).

Everything that writes to fd 1 or 2 goes through the pipes: ``print``, C extensions, and the
subprocesses a test starts (they inherit the descriptors).  pytest's terminal report is written
to the log directly (``report``), so it never mixes with a test's own output.

Like the worker, this file imports only the standard library.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import selectors
import sys
import threading
import time
from collections import deque

HEAD = 1 << 20  # bytes of the run log kept from its start
TAIL = 1 << 20  # ... and from its end
_CHUNK = 1 << 16
_FLUSH_EVERY = 0.25  # seconds between rewrites of the log's tail while output flows
_BATCH = 0.002  # seconds the drain waits after a read (with 1 MiB pipes), so that reads come in batches
_F_SETPIPE_SZ = 1031  # Linux: a larger pipe means fewer wake-ups of the drain thread


class _Tail:
    """The last ``limit`` bytes of a stream, and how many bytes came in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: deque[bytes] = deque()
        self.size = 0  # bytes held (at most limit + one chunk)
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if len(data) >= self.limit:
            self.chunks.clear()
            data = data[-self.limit:]
            self.size = 0
        self.chunks.append(data)
        self.size += len(data)
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.popleft())

    def value(self) -> bytes:
        return b"".join(self.chunks)[-self.limit:]

    def clear(self) -> None:
        self.chunks.clear()
        self.size = self.total = 0


class _LogRaw(io.RawIOBase):
    """A raw stream that writes into the bounded log (pytest's terminal report)."""

    def __init__(self, owner: "BoundedOutput") -> None:
        self.owner = owner

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 - bytes-like
        data = bytes(data)
        with self.owner._lock:
            self.owner._to_log(data)
        return len(data)


class BoundedOutput:
    """Redirects fds 1 and 2 of this process into bounded sinks until ``close``."""

    def __init__(self, limit: int = 16_000, head: int = HEAD, tail: int = TAIL) -> None:
        self.limit = limit
        self.head = head
        self._lock = threading.Lock()
        self._tests = [_Tail(limit), _Tail(limit)]  # stdout, stderr since the last take()
        self._tail = _Tail(tail)
        self._head_written = 0
        self._tail_dirty = False
        self._flushed_at = 0.0
        self._stop = False
        self._thread: threading.Thread | None = None
        self._reads: list[int] = []
        self._wake: tuple[int, int] | None = None  # a pipe whose write end wakes the drain to stop
        self._batch = _BATCH
        self._saved: list[int] = []
        self._streams: tuple = ()
        self.log_fd = -1
        self.stdout = self.stderr = self.report = None

    # -- set-up and tear-down ---------------------------------------------------------------
    def start(self) -> "BoundedOutput":
        self._flush_streams()
        self._streams = (sys.stdout, sys.stderr)
        self.log_fd = os.dup(1)  # the run log, where fd 1 pointed until now
        self._base = self._seekable_offset(self.log_fd)
        self._saved = [os.dup(1), os.dup(2)]
        try:
            self._redirect()
        except BaseException:
            self._restore()  # so that the error itself reaches the log
            raise
        return self

    def _redirect(self) -> None:
        for target in (1, 2):
            r, w = os.pipe()
            try:
                fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
            except OSError:  # not Linux, or a lower pipe-max-size: small pipes, no batching
                self._batch = 0.0
            os.set_blocking(r, False)
            os.dup2(w, target)
            os.close(w)
            self._reads.append(r)
        # Line-buffered, as on a terminal: a test's prints and the raw writes of its C code or
        # subprocesses keep their order.
        self.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        self.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        self.report = io.TextIOWrapper(_LogRaw(self), encoding="utf-8",  # unbuffered: a kill loses nothing
                                       errors="replace", write_through=True)
        # Until the session starts (``begin_tests``), sys.stdout is the log itself: pytest's
        # terminal reporter takes sys.stdout when it is configured, and so writes its report
        # there, never into a test's output.
        sys.stdout, sys.stderr = self.report, self.stderr
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._drain, name="frognano-output", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Drain what is left, write the log's tail, and point fds 1 and 2 at the log again."""
        if self._thread is None:
            return
        self._flush_streams()
        with self._lock:
            self._read_all(rounds=256)
            self._stop = True
        if self._wake is not None:  # without it the drain would notice only at its next timeout
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")
        self._thread.join(2)
        self._thread = None
        with self._lock:
            self._write_tail(final=True)
        with contextlib.suppress(OSError):  # later writes (a traceback) go after the tail
            os.lseek(self.log_fd, 0, os.SEEK_END)
        self._restore()

    def _restore(self) -> None:
        if self._streams:
            sys.stdout, sys.stderr = self._streams
        for target, saved in zip((1, 2), self._saved):
            with contextlib.suppress(OSError):
                os.dup2(saved, target)
                os.close(saved)
        self._saved = []
        for r in self._reads:
            with contextlib.suppress(OSError):
                os.close(r)
        self._reads = []
        for fd in self._wake or ():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake = None
        with contextlib.suppress(OSError):
            os.close(self.log_fd)
        self.log_fd = -1

    # -- what the plugin uses ---------------------------------------------------------------
    def begin_tests(self) -> None:
        """From now on ``print`` goes to fd 1 (and so into each test's output)."""
        self._flush_streams()
        if sys.stdout is self.report:
            sys.stdout = self.stdout
        self.take()

    def take(self) -> tuple[str, str]:
        """Everything written to stdout and stderr since the last call (their last ``limit``
        bytes each, "..." first when more came), and start again from empty."""
        self._flush_streams()
        with self._lock:
            self._read_all(rounds=64)
            out = []
            for t in self._tests:
                text = t.value().decode("utf-8", "replace")
                out.append(("..." + text) if t.total > len(t.value()) else text)
                t.clear()
        return out[0], out[1]

    # -- the drain thread -------------------------------------------------------------------
    def _drain(self) -> None:
        selector = selectors.DefaultSelector()
        for i, r in enumerate(self._reads):
            selector.register(r, selectors.EVENT_READ, i)
        if self._wake is not None:
            selector.register(self._wake[0], selectors.EVENT_READ, None)
        try:
            while True:
                events = selector.select(_FLUSH_EVERY)
                with self._lock:
                    if self._stop:
                        return
                    for key, _ in events:
                        if key.data is not None:
                            self._read(key.fd, key.data, rounds=16)
                    if self._tail_dirty and time.monotonic() - self._flushed_at >= _FLUSH_EVERY:
                        self._write_tail()
                if events and self._batch:
                    # Let a busy writer fill the pipe a little: one read of many lines costs
                    # far less than a wake-up (and a GIL hand-over) per line.
                    time.sleep(self._batch)
        except Exception:  # noqa: BLE001
            # Without a reader the pipes would fill and every writer block until the
            # watchdog kills the run: point the fds back at the log, the lesser evil.
            for target, saved in zip((1, 2), list(self._saved)):
                with contextlib.suppress(OSError):
                    os.dup2(saved, target)
        finally:
            selector.close()

    def _read_all(self, rounds: int) -> None:
        for i, r in enumerate(self._reads):
            self._read(r, i, rounds)

    def _read(self, fd: int, index: int, rounds: int) -> None:
        """Read what ``fd`` holds now (at most ``rounds`` chunks); lock held."""
        for _ in range(rounds):
            try:
                data = os.read(fd, _CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not data:
                return
            self._tests[index].add(data)
            self._to_log(data)

    def _to_log(self, data: bytes) -> None:
        """Into the log's head while there is room, else into its tail; lock held."""
        room = self.head - self._head_written
        if room > 0:
            part = data[:room]
            self._write(part)
            self._head_written += len(part)
            data = data[room:]
        if data:
            self._tail.add(data)
            self._tail_dirty = True

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # a full disk must not stop the drain
            while data:
                n = os.write(self.log_fd, data)
                data = data[n:]

    def _write_tail(self, final: bool = False) -> None:
        """(Re)write the log after its head: a line saying what was left out, then the tail."""
        self._flushed_at = time.monotonic()
        if not self._tail_dirty:
            return
        tail = self._tail.value()
        left_out = self._tail.total - len(tail)
        body = (f"\n[... {left_out} bytes of output left out ...]\n".encode() if left_out else b"") + tail
        if self._base is not None:
            with contextlib.suppress(OSError):
                os.pwrite(self.log_fd, body, self._base + self._head_written)
                os.ftruncate(self.log_fd, self._base + self._head_written + len(body))
                self._tail_dirty = False
        elif final:  # a pipe or a terminal: the tail can only be appended, once
            self._write(body)
            self._tail_dirty = False

    def _flush_streams(self) -> None:
        for stream in (sys.stdout, sys.stderr, self.stdout, self.stderr, self.report):
            with contextlib.suppress(Exception):
                stream.flush()

    @staticmethod
    def _seekable_offset(fd: int) -> int | None:
        """Where the log's own bytes start, or None when it cannot be rewritten in place."""
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
                return None
            return os.lseek(fd, 0, os.SEEK_CUR)
        except OSError:
            return None
