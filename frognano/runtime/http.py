"""A model behind any OpenAI-compatible chat endpoint: Ollama, llama.cpp server, vLLM, mlx_lm.server.

``SPEC`` is ``openai:MODEL@BASE_URL`` (``qwen2.5-coder:1.5b@http://localhost:11434/v1``);
``openai:MODEL`` alone means ``http://127.0.0.1:8080/v1``, so nothing leaves the machine unless
the user names a remote endpoint (DESIGN.md invariant 4).  Only the standard library is used
(``http.client``): no ``openai`` or ``httpx`` dependency, no proxy settings picked up from the
environment.

One request per ``generate``, on its own connection, so a cancel can close it without touching
other requests.  Transient failures (connection refused or reset, HTTP 5xx, 429) are retried with
exponential backoff; everything else becomes one ``ModelError`` line naming the endpoint
(invariant 5).  ``constrain`` is ignored: the server owns decoding, and the OpenAI API has no
portable way to restrict sampling to well-formed tool calls, so a malformed call from a served
model reaches the harness as text and is answered there like any other.  For the same reason
``Generation.logprobs`` stays empty, even with ``Sampling(logprobs=True)``: the distribution the
server sampled from (its grammar, its top-p) is not seen here, and RL training needs exactly
that one.  What goes over the wire (the request's messages, replies whole or streamed, error
bodies) is read and written in ``wire.py``; this file holds the model, its retries and
cancellation.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .base import Generation, Message, ModelError, Sampling, ToolSchema, one_line
from .wire import (
    Reply,
    content_text,
    error_detail,
    is_event_stream,
    merge_tool_call,
    render_tool_calls,
    retry_after_seconds,
    sse_events,
    take_usage,
    wire_messages,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"
_MAX_BACKOFF = 30.0  # seconds; also caps a server's Retry-After
_T = TypeVar("_T")
_CANCEL_POLL = 0.05  # seconds between looks at the cancel event while a read blocks


class _Transient(Exception):
    """A failure worth another try (connection refused, 5xx, 429); carries the final message."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Cancelled(Exception):
    pass


class _StatusError(ModelError):
    """An HTTP error status the server gave; ``status`` lets the model check accept a missing /models."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def split_spec(rest: str) -> tuple[str, str]:
    """``"MODEL@URL"`` -> ``(MODEL, URL)``; ``"MODEL"`` -> ``(MODEL, DEFAULT_BASE_URL)``.

    URLs may contain ``@`` (``http://user@host``), so the split is at the first ``@`` that starts
    an ``http(s)://`` URL; failing that, at the last ``@`` (``model@localhost:11434/v1``).
    """
    match = re.match(r"^(.*?)@(https?://.*)$", rest, re.S)
    if match:
        model, url = match.groups()
    elif "@" in rest:
        model, _, url = rest.rpartition("@")
        if "://" not in url:
            url = "http://" + url  # "model@localhost:11434/v1"
    else:
        model, url = rest, DEFAULT_BASE_URL
    model, url = model.strip(), url.strip().rstrip("/")
    if not model:
        raise ModelError(f"openai:{rest}: no model name; expected openai:MODEL@BASE_URL")
    _check_url(url, f"openai:{rest}: ")
    return model, url


def _check_url(url: str, context: str = "") -> urllib.parse.SplitResult:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ModelError(f"{context}{url!r} is not an http(s) URL; expected openai:MODEL@BASE_URL")
    try:
        parsed.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ModelError(f"{context}{url!r} has a malformed port") from None
    return parsed


class OpenAIModel:
    """``base.Model`` over ``POST {base_url}/chat/completions``.

    ``retries`` counts tries after the first; the n-th retry waits ``backoff * 2**(n-1)`` seconds
    (or the server's ``Retry-After`` for 429, capped at 30 s).  ``timeout`` bounds connecting and
    every read: a streaming reply may take longer in total as long as pieces keep coming.
    """

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        model_check: bool = True,
    ) -> None:
        if timeout <= 0:
            raise ModelError(f"timeout must be positive, got {timeout}")
        if retries < 0:
            raise ModelError(f"retries must not be negative, got {retries}")
        if backoff < 0:
            raise ModelError(f"backoff must not be negative, got {backoff}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.name = f"openai:{model}@{self.base_url}"
        self.api_key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or None)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.model_check = model_check
        self._checked = not model_check
        self._check_lock = threading.Lock()
        self._url = _check_url(self.base_url)

    @classmethod
    def from_spec(cls, rest: str, **opts: Any) -> OpenAIModel:
        """``rest`` is the SPEC after ``openai:``; ``opts`` are the keyword options of ``__init__``."""
        known = {"api_key", "timeout", "retries", "backoff", "model_check"}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ModelError(
                f"openai model: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        model, url = split_spec(rest)
        return cls(model, url, **opts)

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, {self.base_url!r})"

    # -- the protocol ------------------------------------------------------------------------

    def generate(
        self,
        messages: list[Message],
        tools: list[ToolSchema] | None = None,
        sampling: Sampling | None = None,
        *,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
        constrain: bool = True,  # ignored: the server owns decoding (see the module docstring)
        # Ignored too: sending fewer tools would change the server's rendering of the prompt
        # (and its prompt cache) from turn to turn; the harness refuses a call not offered.
        offered: Sequence[str] | None = None,
    ) -> Generation:
        sampling = sampling or Sampling()
        if cancel is not None and cancel.is_set():
            return Generation("", finish_reason="cancelled")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": wire_messages(messages),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "stream": on_text is not None,
        }
        if tools:
            body["tools"] = tools
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if on_text is not None:
            body["stream_options"] = {"include_usage": True}  # token counts in the last chunk

        reply = Reply()

        def read(resp: http.client.HTTPResponse) -> None:
            if on_text is not None and is_event_stream(resp):
                self._read_stream(resp, reply, on_text, cancel)
            else:  # not streaming, or a server that ignored "stream": one JSON object
                self._read_whole(resp, reply)
                if on_text is not None and reply.text:
                    on_text(reply.text)

        try:
            self._check_once(cancel)
            self._call("POST", "/chat/completions", body, cancel, read)
        except _Cancelled:
            return Generation(reply.text, finish_reason="cancelled", prompt_tokens=reply.prompt_tokens,
                              completion_tokens=reply.completion_tokens)

        text = reply.text
        calls = render_tool_calls(reply.tool_calls)
        if calls:
            rendered = ("\n" if text else "") + calls
            text += rendered
            if on_text is not None:
                on_text(rendered)  # the pieces still join to the final text
        finish = "length" if reply.finish_reason == "length" else "stop"  # "tool_calls", "eos", None: stop
        return Generation(text, finish_reason=finish, prompt_tokens=reply.prompt_tokens,
                          completion_tokens=reply.completion_tokens)

    def close(self) -> None:
        """Nothing to release: every request has its own connection, closed when it ends."""

    # -- the model check ---------------------------------------------------------------------

    def served_models(self) -> list[str] | None:
        """The model ids ``GET /models`` lists, or None for a server that does not list them."""
        return self._served_models(None)

    def check_model(self) -> None:
        """If the server lists models and ours is not among them, a ModelError (once per model)."""
        self._check_once(None)

    def _served_models(self, cancel: threading.Event | None) -> list[str] | None:
        try:
            raw = self._call("GET", "/models", None, cancel, lambda resp: resp.read())
        except _StatusError as exc:
            if exc.status in (404, 405, 501):
                return None  # no listing endpoint: accepted
            raise
        try:
            data = json.loads(raw)
            ids = [str(m["id"]) for m in data["data"]]
        except (ValueError, KeyError, TypeError):
            return None  # a listing we cannot read is no evidence against the name
        return ids or None

    def _check_once(self, cancel: threading.Event | None) -> None:
        if self._checked:
            return
        with self._check_lock:
            if self._checked:
                return
            served = self._served_models(cancel)  # a cancel propagates; the check runs again next time
            if served is not None and not _serves(served, self.model):
                shown = ", ".join(served[:10]) + (", ..." if len(served) > 10 else "")
                raise ModelError(f"model {self.model} is not served by {self.base_url} (it serves: {shown})")
            self._checked = True

    # -- HTTP --------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        cancel: threading.Event | None,
        read: Callable[[http.client.HTTPResponse], _T],
    ) -> _T:
        """``read`` applied to a status-200 response, after bounded retries of transient failures.

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
                        resp = self._send(conn, method, path, payload, headers, cancel, watch)
                        try:
                            return read(resp)
                        finally:
                            resp.close()  # on a cancel, this hangs up and the server stops generating
                    except (OSError, http.client.HTTPException) as exc:
                        # the cancel watcher's shutdown surfaces here as a reset or a short read
                        if cancel is not None and cancel.is_set():
                            raise _Cancelled from None
                        if isinstance(exc, TimeoutError):
                            raise ModelError(f"{self.base_url} did not answer within {self.timeout:g} s") from None
                        detail = one_line(exc, limit=None)
                        raise ModelError(f"{self.base_url} broke off its reply: {detail}") from None
            except _Transient as exc:
                if attempt >= self.retries:
                    raise ModelError(str(exc)) from None
                delay = self.backoff * 2**attempt if exc.retry_after is None else exc.retry_after
                delay = min(_MAX_BACKOFF, delay)
                attempt += 1
                log.info("%s; retry %d/%d in %.2g s", exc, attempt, self.retries, delay)
                if cancel is not None:
                    if cancel.wait(delay):
                        raise _Cancelled from None
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
    ) -> http.client.HTTPResponse:
        url = self.base_url + path
        try:
            conn.connect()
            watch.attach(conn.sock)  # the response keeps this socket even after conn lets go of it
            conn.request(method, (self._url.path or "") + path, body=payload, headers=headers)
            resp = conn.getresponse()
        except TimeoutError:
            raise  # reported by _call, not retried: a server that sat out the timeout will again
        except ConnectionRefusedError:
            raise _Transient(f"cannot reach {self.base_url}: connection refused — is the server running?") from None
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine) as exc:
            if cancel is not None and cancel.is_set():
                raise _Cancelled from None
            raise _Transient(f"cannot reach {self.base_url}: {one_line(exc, limit=None)}") from None
        except OSError as exc:  # name resolution, no route, TLS
            if cancel is not None and cancel.is_set():
                raise _Cancelled from None
            raise _Transient(f"cannot reach {self.base_url}: {one_line(exc.strerror or exc, limit=None)}") from None
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
            raise _Transient(f"{method} {url} failed: {said}", retry_after)
        if status == 404:
            raise _StatusError(
                f"model {self.model} is not served by {self.base_url} ({method} {path}: {said}) — check the name,"
                " and that the base URL is the API root (it usually ends in /v1)",
                status,
            )
        if status in (401, 403):
            raise _StatusError(f"{method} {url}: {said} — check the api_key (OPENAI_API_KEY)", status)
        raise _StatusError(f"{method} {url}: {said}", status)

    # -- reading replies ---------------------------------------------------------------------

    def _read_whole(self, resp: http.client.HTTPResponse, reply: Reply) -> None:
        raw = resp.read()
        data = self._decode(raw)
        choice = self._first_choice(data)
        message = choice.get("message")
        if not isinstance(message, dict):
            raise self._malformed("a choice has no message")
        reply.text = content_text(message.get("content"))
        for index, call in enumerate(message.get("tool_calls") or []):
            merge_tool_call(reply.tool_calls, call, index)
        reply.finish_reason = choice.get("finish_reason")
        take_usage(reply, data)

    def _read_stream(
        self,
        resp: http.client.HTTPResponse,
        reply: Reply,
        on_text: Callable[[str], None],
        cancel: threading.Event | None,
    ) -> None:
        for event in sse_events(resp):
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            if event == "[DONE]":
                return
            data = self._decode(event.encode())
            take_usage(reply, data)
            choices = data.get("choices")
            if not choices:  # the usage-only chunk at the end
                continue
            choice = choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else None
            delta = choice.get("delta") if choice else None
            if not isinstance(delta, dict):
                raise self._malformed("a stream chunk has no delta")
            piece = content_text(delta.get("content"))
            if piece:
                reply.text += piece
                on_text(piece)
            for position, call in enumerate(delta.get("tool_calls") or []):
                index = call.get("index", position) if isinstance(call, dict) else position
                merge_tool_call(reply.tool_calls, call, index)
            if choice.get("finish_reason"):
                reply.finish_reason = choice["finish_reason"]
        if cancel is not None and cancel.is_set():
            raise _Cancelled
        if reply.finish_reason is None:
            raise ModelError(f"{self.base_url} closed the stream before it finished")

    def _decode(self, raw: bytes) -> dict[str, Any]:
        try:
            data = json.loads(raw)
        except ValueError:
            shown = one_line(raw[:80].decode("utf-8", "replace"), limit=None) or "an empty body"
            raise ModelError(f"{self.base_url} returned a reply that is not JSON: {shown!r}") from None
        if not isinstance(data, dict):
            raise self._malformed(f"expected an object, got {type(data).__name__}")
        if "error" in data and "choices" not in data:
            raise ModelError(f"{self.base_url} reported an error: {error_detail(raw)}")
        return data

    def _first_choice(self, data: dict[str, Any]) -> dict[str, Any]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._malformed("no choices")
        return choices[0]

    def _malformed(self, what: str) -> ModelError:
        return ModelError(f"{self.base_url} returned a malformed reply: {what}")


# -- helpers ---------------------------------------------------------------------------------


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
            raise _Cancelled

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


def _serves(served: list[str], model: str) -> bool:
    """Ollama lists ``name:latest`` for ``name``; paths may differ by a trailing slash."""
    wanted = {model, model.rstrip("/"), f"{model}:latest"}
    return any(s in wanted or s.rstrip("/") in wanted for s in served)
