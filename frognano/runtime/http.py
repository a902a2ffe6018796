"""A model behind any OpenAI-compatible chat endpoint: Ollama, llama.cpp server, vLLM, mlx_lm.server.

``SPEC`` is ``openai:MODEL@BASE_URL`` (``qwen2.5-coder:1.5b@http://localhost:11434/v1``);
``openai:MODEL`` alone means ``http://127.0.0.1:8080/v1``, so nothing leaves the machine unless
the user names a remote endpoint (docs/ARCHITECTURE.md, invariant 4).  Only the standard library is used
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
bodies) is read and written in ``wire.py``, the request with its retries and cancellation is
``transport.py``'s, and the spec and the served model's name are ``endpoint.py``'s; this file
holds the model: the protocol, the model check and the reading of replies.

The model name is matched against ``GET /models``: exactly, with Ollama's implicit ``:latest``,
or by file name, since llama-cpp-python's server (and mlx_lm.server) list a model by the path it
was started with: ``openai:SmolLM2-135M-Instruct.Q4_1@...`` (or ``...Q4_1.gguf``) matches a listed
``/models/SmolLM2-135M-Instruct.Q4_1.gguf``, and the request then names the listed id.

The context window: the ``context`` option, else what the server says (vLLM's ``max_model_len``
in ``/models``, llama.cpp's ``llama-server`` ``GET /props``, the number an overflow error
names); llama-cpp-python and Ollama report none.  Where it is known, ``max_tokens`` is cut so
the prompt and the reply fit (see ``_fit``).  A prompt that does not fit (the server's HTTP
400, or llama-cpp-python's empty 200 stream, whose cause a second, unstreamed request of one
token recovers) is a ``ContextOverflow``: the episode ends, the model is not broken.  Prompt
sizes before sending, and counts a reply lacks, come from ``counting.TokenCounter`` (the
``tokenizer`` option, else an estimate).

Options go in the spec after ``#`` (a URL's fragment never reaches the server):
``openai:smollm2@http://127.0.0.1:8080/v1#context=2048,tokenizer=/models/smollm2.gguf``;
``tools=prompt`` lists the tools in the system prompt instead of sending ``tools=``, for a
server whose chat template ignores them (SmolLM2's, served by llama.cpp).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .base import ContextOverflow, Generation, Message, ModelError, Sampling, ToolSchema, one_line
from .counting import TokenCounter
from .endpoint import (
    DEFAULT_BASE_URL,
    as_tokens,
    check_url,
    match_model,
    not_served,
    spec_options,
    split_spec,
    window_of,
)
from .prompt import with_tools_in_system
from .transport import Cancelled, EmptyStream, HTTPClient, StatusError
from .wire import (
    Reply,
    content_text,
    context_window_in,
    error_detail,
    is_context_overflow,
    is_event_stream,
    merge_tool_call,
    render_tool_calls,
    sse_events,
    take_usage,
    wire_messages,
)

__all__ = ["DEFAULT_BASE_URL", "OpenAIModel", "match_model", "split_spec"]  # the endpoint's names, here too

log = logging.getLogger(__name__)

_MIN_REPLY = 64  # tokens an estimated prompt size never cuts a reply below (a tool call takes 20 to 60)


class OpenAIModel(HTTPClient):
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
        context: int | None = None,
        tokenizer: str | None = None,
        tools: str = "server",
    ) -> None:
        if timeout <= 0:
            raise ModelError(f"timeout must be positive, got {timeout}")
        if retries < 0:
            raise ModelError(f"retries must not be negative, got {retries}")
        if backoff < 0:
            raise ModelError(f"backoff must not be negative, got {backoff}")
        if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
            raise ModelError(f"context must be a whole number of tokens, at least 1, got {context!r}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.name = f"openai:{model}@{self.base_url}"
        self.api_key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or None)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.model_check = model_check
        self.context = context  # the context window as set; ``context_window`` adds what the server says
        if tools not in ("server", "prompt"):
            raise ModelError(f"tools must be server or prompt, got {tools!r}")
        # "prompt": the server's chat template ignores tools= (SmolLM2's does), so the schemas go
        # into the system prompt, as the in-process backends put them for such a template.
        self.tools_in_prompt = tools == "prompt"
        self.counter = TokenCounter(tokenizer)
        self._served_id: str | None = None  # the id /models lists for ``model`` (a path, for llama.cpp)
        self._found_window: int | None = None  # the window the server reported (listing, /props, an overflow)
        self._estimating_said = False
        self._checked = not model_check
        self._check_lock = threading.Lock()
        self._url = check_url(self.base_url)

    @classmethod
    def from_spec(cls, rest: str, **opts: Any) -> OpenAIModel:
        """``rest`` is the SPEC after ``openai:``, with options after ``#`` (``#context=2048``);
        ``opts`` are the keyword options of ``__init__`` (the spec's own options win)."""
        known = {"api_key", "timeout", "retries", "backoff", "model_check", "context", "tokenizer", "tools"}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ModelError(
                f"openai model: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        rest, _, fragment = rest.partition("#")
        model, url = split_spec(rest)
        return cls(model, url, **{**opts, **spec_options(fragment, f"openai:{rest}#{fragment}")})

    @property
    def context_window(self) -> int | None:
        """Tokens the prompt and the reply share: the ``context`` option, or the server's own
        figure (the smaller when both are known), or None when neither is."""
        known = [w for w in (self.context, self._found_window) if w]
        return min(known) if known else None

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
        offered: Sequence[str | ToolSchema] | None = None,
    ) -> Generation:
        sampling = sampling or Sampling()
        if cancel is not None and cancel.is_set():
            return Generation("", finish_reason="cancelled")
        wire = wire_messages(messages)
        if tools and self.tools_in_prompt:
            wire, tools = with_tools_in_system(wire, tools), None
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
            prompt = self.counter.prompt(wire, tools)  # before sending: no server counts a prompt sooner
            body: dict[str, Any] = {
                "model": self._served_id or self.model,
                "messages": wire,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "max_tokens": self._fit(sampling.max_tokens, prompt),
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
            try:
                self._call("POST", "/chat/completions", body, cancel, read)
            except EmptyStream:
                self._explain_empty_stream(body, cancel)
        except Cancelled:
            return Generation(reply.text, finish_reason="cancelled", prompt_tokens=reply.prompt_tokens,
                              completion_tokens=reply.completion_tokens)

        text = reply.text
        calls = render_tool_calls(reply.tool_calls)
        if calls:
            rendered = ("\n" if text else "") + calls
            text += rendered
            if on_text is not None:
                on_text(rendered)  # the pieces still join to the final text
        if reply.counted:
            self.counter.learn(wire, tools, reply.prompt_tokens)
            prompt_tokens, completion_tokens = reply.prompt_tokens, reply.completion_tokens
        else:  # llama-cpp-python streams no counts: without them the episode's token budget never trips
            if not self._estimating_said:
                self._estimating_said = True
                how = f"with the tokenizer {self.counter.path}" if self.counter.exact else "estimated from the text"
                log.info("%s reports no token counts; they are counted %s", self.base_url, how)
            prompt_tokens, completion_tokens = prompt, self.counter.text(text)
        finish = "length" if reply.finish_reason == "length" else "stop"  # "tool_calls", "eos", None: stop
        return Generation(text, finish_reason=finish, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens)

    def _fit(self, wanted: int, prompt: int) -> int:
        """``max_tokens`` cut so ``prompt`` and the reply fit the context window (when known).

        Only an exact count (the ``tokenizer`` option) refuses a prompt before it is sent, or cuts
        a reply to nothing: an estimate may be off either way (a template that leaves the tool
        schemas out, text that packs more characters a token), so on its word the reply keeps
        at least ``_MIN_REPLY`` tokens and the server, whose refusal is the same
        ContextOverflow, settles the rest.
        """
        window = self.context_window
        if window is None:
            return wanted
        room = window - prompt
        if self.counter.exact and room < 1:
            raise ContextOverflow(f"{self.base_url}: the prompt ({prompt} tokens) does not fit the context window "
                                  f"of {window} tokens", window=window)
        fit = min(wanted, room if self.counter.exact else max(room, _MIN_REPLY))
        if fit < wanted:
            log.debug("max_tokens %d cut to %d: the prompt takes ~%d of %d tokens", wanted, fit, prompt, window)
        return fit

    def _explain_empty_stream(self, body: dict[str, Any], cancel: threading.Event | None) -> None:
        """A stream that ended before its first event carries no cause: ask again, unstreamed and
        for one token, so the server says it (a prompt that does not fit is refused before any
        decoding, so this costs little).  Always raises."""
        probe = {k: v for k, v in body.items() if k != "stream_options"}
        probe.update(stream=False, max_tokens=1)
        self._call("POST", "/chat/completions", probe, cancel, lambda resp: resp.read())
        raise ModelError(f"{self.base_url} ended a stream without sending anything (the same request unstreamed "
                         "was answered)")

    def close(self) -> None:
        """Nothing to release: every request has its own connection, closed when it ends."""

    # -- the model check ---------------------------------------------------------------------

    def served_models(self) -> list[str] | None:
        """The model ids ``GET /models`` lists, or None for a server that does not list them."""
        listing = self._listing(None)
        return None if listing is None else [str(m["id"]) for m in listing]

    def check_model(self) -> None:
        """If the server lists models and ours is not among them, a ModelError (once per model)."""
        self._check_once(None)

    def _listing(self, cancel: threading.Event | None) -> list[dict[str, Any]] | None:
        """The entries of ``GET /models`` (each with an ``id``), or None for a server without them."""
        try:
            raw = self._call("GET", "/models", None, cancel, lambda resp: resp.read())
        except StatusError as exc:
            if exc.status in (404, 405, 501):
                return None  # no listing endpoint: accepted
            raise
        try:
            entries = [m for m in json.loads(raw)["data"] if isinstance(m, dict) and "id" in m]
        except (ValueError, KeyError, TypeError):
            return None  # a listing we cannot read is no evidence against the name
        return entries or None

    def _check_once(self, cancel: threading.Event | None) -> None:
        """The name against the listing, and the context window where the server tells it."""
        if self._checked:
            return
        with self._check_lock:
            if self._checked:
                return
            listing = self._listing(cancel)  # a cancel propagates; the check runs again next time
            if listing is not None:
                served = [str(m["id"]) for m in listing]
                found = match_model(served, self.model)
                if found is None:
                    raise ModelError(not_served(self.model, self.base_url, served))
                self._served_id = found
                self._found_window = window_of(listing[served.index(found)])
            if self.context is None and self._found_window is None:
                self._found_window = self._props_window(cancel)
            if self.context_window is not None:
                log.info("%s: context window %d tokens", self.name, self.context_window)
            self._checked = True

    def _props_window(self, cancel: threading.Event | None) -> int | None:
        """llama.cpp's llama-server tells its ``n_ctx`` at ``GET /props`` (beside, not under, /v1)."""
        path = self._url.path or ""
        root = path[: -len("/v1")] if path.endswith("/v1") else path
        try:
            raw = self._call("GET", "/props", None, cancel, lambda resp: resp.read(), prefix=root)
            data = json.loads(raw)
        except Cancelled:
            raise
        except (ModelError, ValueError):
            return None  # most servers have no /props: nothing learned
        if not isinstance(data, dict):
            return None
        settings = data.get("default_generation_settings")
        return as_tokens(data.get("n_ctx")) or (as_tokens(settings.get("n_ctx")) if isinstance(settings, dict) else None)

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
        events = 0
        for event in sse_events(resp):
            events += 1
            if cancel is not None and cancel.is_set():
                raise Cancelled
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
            raise Cancelled
        if events == 0:
            raise EmptyStream
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
            if is_context_overflow(raw):  # an error event in a stream, or a 200 that is one
                raise self._overflow(raw, error_detail(raw))
            raise ModelError(f"{self.base_url} reported an error: {error_detail(raw)}")
        return data

    def _overflow(self, raw: bytes, said: str) -> ContextOverflow:
        """The overflow an error body reports; the window it names is kept, so the next prompt is
        cut to fit before it is sent."""
        window = context_window_in(raw)
        if window is not None:
            self._found_window = window
        return ContextOverflow(f"{self.base_url}: the prompt does not fit the model's context window ({said})",
                               error_detail(raw), window)

    def _first_choice(self, data: dict[str, Any]) -> dict[str, Any]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._malformed("no choices")
        return choices[0]

    def _malformed(self, what: str) -> ModelError:
        return ModelError(f"{self.base_url} returned a malformed reply: {what}")
