"""The OpenAI chat-completions wire format, as ``http.py`` speaks it.

Out: the harness's messages as strict servers accept them (``wire_messages``).  In: a reply,
whole or as server-sent events, folded into a ``Reply`` (text, tool calls that may arrive in
pieces, token counts), its tool calls rendered in the text form the harness parses, and a
server's error body or ``Retry-After`` read.  Only the standard library: no mlx, torch or
transformers.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .base import Message, one_line
from .grammar import tool_call_text
from .prompt import tool_results_as_user


@dataclass
class ToolCallParts:
    """One tool call as it arrives, possibly in streamed pieces."""

    name: str = ""
    arguments: str = ""
    parsed: Any = None  # arguments that arrived already decoded (some servers send an object)


@dataclass
class Reply:
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    counted: bool = False  # the server reported token counts (llama-cpp-python streams none)
    tool_calls: dict[int, ToolCallParts] = field(default_factory=dict)


def is_event_stream(resp: http.client.HTTPResponse) -> bool:
    return "text/event-stream" in (resp.getheader("Content-Type") or "")


def sse_events(resp: http.client.HTTPResponse) -> Iterator[str]:
    """The ``data`` of each server-sent event; comments (``: keepalive``) and other fields skipped."""
    lines: list[str] = []
    while True:
        raw = resp.readline()
        if not raw:
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        if line.startswith("data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(" ") else value)
    if lines:
        yield "\n".join(lines)


def content_text(content: Any) -> str:
    """Message content as text: a string, None, or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return str(content)


def merge_tool_call(calls: dict[int, ToolCallParts], call: Any, index: int) -> None:
    """Fold one tool call, or one streamed piece of it, into ``calls``."""
    if not isinstance(call, dict):
        return
    fn = call.get("function") if isinstance(call.get("function"), dict) else call
    parts = calls.setdefault(index if isinstance(index, int) else len(calls), ToolCallParts())
    name = fn.get("name")
    if isinstance(name, str) and name != parts.name:
        parts.name += name  # streamed in pieces; some servers repeat the whole name in every chunk
    args = fn.get("arguments")
    if isinstance(args, str):
        parts.arguments += args
    elif args is not None:
        parts.parsed = args


def render_tool_calls(calls: dict[int, ToolCallParts]) -> str:
    """Structured tool calls in the Qwen text form the harness parses (one block per call)."""
    blocks = []
    for _, parts in sorted(calls.items()):
        if parts.parsed is not None:
            arguments = parts.parsed
        elif parts.arguments.strip():
            try:
                arguments = json.loads(parts.arguments)
            except ValueError:
                arguments = parts.arguments  # garbage stays visible; the harness answers it with an error
        else:
            arguments = {}
        blocks.append(tool_call_text(parts.name, arguments))
    return "\n".join(blocks)


def take_usage(reply: Reply, data: dict[str, Any]) -> None:
    usage = data.get("usage")
    if isinstance(usage, dict):
        counts = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
        reply.counted = reply.counted or any(isinstance(c, int) for c in counts)
        reply.prompt_tokens = _count(usage.get("prompt_tokens"), reply.prompt_tokens)
        reply.completion_tokens = _count(usage.get("completion_tokens"), reply.completion_tokens)


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and value >= 0 else default


def error_detail(raw: bytes) -> str:
    """The server's own error message: OpenAI ``{"error": {"message"}}``, ``{"error": "..."}``, or text."""
    text = raw.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return one_line(text, limit=None)[:200]
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return one_line(error if isinstance(error, str) else json.dumps(error), limit=None)[:200]
    return one_line(text, limit=None)[:200]


# What servers say when the prompt (with max_tokens) outgrows the context window: vLLM and
# llama-cpp-python "This model's maximum context length is N tokens ..." (code
# context_length_exceeded), llama.cpp's llama-server "the request exceeds the available context
# size" (type exceed_context_size_error, with n_ctx), older ones "... exceed context window of N".
_OVERFLOW = re.compile(r"context[ _-]?(length|window|size)|n_ctx|maximum context", re.I)
_EXCEEDS = re.compile(r"exceed", re.I)
_ABOUT_TOKENS = re.compile(r"token|prompt", re.I)
_WINDOW = re.compile(
    r"maximum context length is (\d+)|context (?:window|size|length) (?:of|is) (\d+)|\bn_ctx\"?\s*[:=]\s*(\d+)", re.I)


def is_context_overflow(raw: bytes) -> bool:
    """Whether an error body (a 400's) says the prompt does not fit the context window."""
    text = raw.decode("utf-8", "replace")
    return bool(_OVERFLOW.search(text) or (_EXCEEDS.search(text) and _ABOUT_TOKENS.search(text)))


def context_window_in(raw: bytes) -> int | None:
    """The context window an overflow's error body names, if it names one."""
    match = _WINDOW.search(raw.decode("utf-8", "replace"))
    if match is None:
        return None
    window = int(next(g for g in match.groups() if g))
    return window if window > 0 else None


def retry_after_seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def wire_messages(messages: list[Message]) -> list[Message]:
    """The harness's messages as a server gets them: tool results as user turns wrapped in
    ``<tool_response>``, rendered by the one function the in-process backends use too
    (``prompt.tool_results_as_user``), so a model reads the same conversation either way."""
    return tool_results_as_user(messages)
