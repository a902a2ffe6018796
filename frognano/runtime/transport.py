"""One request to an OpenAI-compatible endpoint: sent on its own connection, retried when the
failure is transient (connection refused or reset, HTTP 5xx, 429) with exponential backoff,
cancellable while it blocks, and any other error status turned into one ``ModelError`` line
naming the endpoint.

``HTTPClient`` is a mixin, as ``sandbox/forkserver.py``'s client is: ``http.OpenAIModel``
supplies ``base_url``, ``model``, ``api_key``, ``timeout``, ``retries``, ``backoff``, the parsed
``_url`` and ``_overflow`` (it keeps the window an overflow names).  Apart from the model so that
``http.py`` reads as the protocol and its replies, this as the wire's plumbing.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from .base import ContextOverflow, ModelError, one_line
from .wire import error_detail, is_context_overflow, retry_after_seconds

log = logging.getLogger(__name__)

_MAX_BACKOFF = 30.0  # seconds; also caps a server's Retry-After
_T = TypeVar("_T")
_CANCEL_POLL = 0.05  # seconds between looks at the cancel event while a read blocks


class Transient(Exception):
    """A failure worth another try (connection refused, 5xx, 429); carries the final message."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Cancelled(Exception):
    """The caller's cancel event was set: the request is given up."""


class EmptyStream(Exception):
    """A 200 event stream that ended before its first event (llama-cpp-python's overflow)."""


class StatusError(ModelError):
    """An HTTP error status the server gave; ``status`` lets the model check accept a missing /models."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class HTTPClient:
    """``_call``: one request, retried and cancellable (see the module docstring)."""

    base_url: str
    model: str
    api_key: str | None
    timeout: float
    retries: int
    backoff: float
    _url: urllib.parse.SplitResult

    def _overflow(self, raw: bytes, said: str) -> ContextOverflow:
        raise NotImplementedError  # the model's: it keeps the window the error names

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        cancel: threading.Event | None,
        read: Callable[[http.client.HTTPResponse], _T],
        *,
        prefix: str | None = None,
    ) -> _T:
        """``read`` applied to a status-200 response, after bounded retries of transient failures.
        ``path`` is under the base URL's path, or under ``prefix`` when given.

        Only the request and its status are retried: once ``read`` has begun, text may already
        have reached ``on_text``, so a failure there ends the call.
        """
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json, text/event-stream", "User-Agent": "frognano"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        attempt = 0
        while True:
            conn = self._connection()
            try:
                with _CancelWatch(cancel) as watch:
                    try:
                        resp = self._send(conn, method, path, payload, headers, cancel, watch, prefix)
                        try:
                            return read(resp)
                        finally:
                            resp.close()  # on a cancel, this hangs up and the server stops generating
                    except (OSError, http.client.HTTPException) as exc:
                        # the cancel watcher's shutdown surfaces here as a reset or a short read
                        if cancel is not None and cancel.is_set():
                            raise Cancelled from None
                        if isinstance(exc, TimeoutError):
                            raise ModelError(f"{self.base_url} did not answer within {self.timeout:g} s") from None
                        detail = one_line(exc, limit=None)
                        raise ModelError(f"{self.base_url} broke off its reply: {detail}") from None
            except Transient as exc:
                if attempt >= self.retries:
                    raise ModelError(str(exc)) from None
                delay = self.backoff * 2**attempt if exc.retry_after is None else exc.retry_after
                delay = min(_MAX_BACKOFF, delay)
                attempt += 1
                log.info("%s; retry %d/%d in %.2g s", exc, attempt, self.retries, delay)
                if cancel is not None:
                    if cancel.wait(delay):
                        raise Cancelled from None
                else:
                    time.sleep(delay)
            finally:
                conn.close()

    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._url.scheme == "https" else http.client.HTTPConnection
        return cls(self._url.hostname, self._url.port, timeout=self.timeout)

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        payload: bytes | None,
        headers: dict[str, str],
        cancel: threading.Event | None,
        watch: _CancelWatch,
        prefix: str | None = None,
    ) -> http.client.HTTPResponse:
        prefix = (self._url.path or "") if prefix is None else prefix
        url = f"{self._url.scheme}://{self._url.netloc}{prefix}{path}"
        try:
            conn.connect()
            watch.attach(conn.sock)  # the response keeps this socket even after conn lets go of it
            conn.request(method, prefix + path, body=payload, headers=headers)
            resp = conn.getresponse()
        except TimeoutError:
            raise  # reported by _call, not retried: a server that sat out the timeout will again
        except ConnectionRefusedError:
            raise Transient(f"cannot reach {self.base_url}: connection refused — is the server running?") from None
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine) as exc:
            if cancel is not None and cancel.is_set():
                raise Cancelled from None
            raise Transient(f"cannot reach {self.base_url}: {one_line(exc, limit=None)}") from None
        except OSError as exc:  # name resolution, no route, TLS
            if cancel is not None and cancel.is_set():
                raise Cancelled from None
            raise Transient(f"cannot reach {self.base_url}: {one_line(exc.strerror or exc, limit=None)}") from None
        if resp.status == 200:
            return resp
        try:
            raw = resp.read(64 * 1024)
        finally:
            resp.close()
        detail = error_detail(raw)
        status = resp.status
        said = f"HTTP {status}{': ' + detail if detail else ''}"
        if status == 429 or (500 <= status < 600 and status not in (501, 505)):
            retry_after = retry_after_seconds(resp.getheader("Retry-After")) if status == 429 else None
            raise Transient(f"{method} {url} failed: {said}", retry_after)
        if status == 404:
            raise StatusError(
                f"model {self.model} is not served by {self.base_url} ({method} {path}: {said}) — check the name,"
                " and that the base URL is the API root (it usually ends in /v1)",
                status,
            )
        if status in (400, 413) and is_context_overflow(raw):
            raise self._overflow(raw, f"HTTP {status}: {detail}")
        if status in (401, 403):
            raise StatusError(f"{method} {url}: {said} — check the api_key (OPENAI_API_KEY)", status)
        raise StatusError(f"{method} {url}: {said}", status)


class _CancelWatch:
    """While active, a set ``cancel`` shuts the attached socket down, which wakes a blocked read.

    Checking between chunks alone would leave a cancel waiting for the next chunk, and a server
    still processing a long prompt (or answering without streaming) may send none for a minute.
    """

    def __init__(self, cancel: threading.Event | None) -> None:
        self.cancel = cancel
        self.sock: socket.socket | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, sock: socket.socket | None) -> None:
        self.sock = sock
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled

    def _watch(self) -> None:
        assert self.cancel is not None
        while not self._done.wait(_CANCEL_POLL):
            if self.cancel.is_set() and self.sock is not None:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed
                return

    def __enter__(self) -> _CancelWatch:
        if self.cancel is not None:
            self._thread = threading.Thread(target=self._watch, name="frognano-http-cancel", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
