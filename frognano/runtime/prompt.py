"""How the harness's conversation reaches a model: one rendering of tool results and of the tool
list, whichever backend runs the model.

The harness speaks tool calls as text in the Qwen form (``<tool_call>`` JSON) and answers them
with ``tool`` messages.  Chat templates differ in what they do with either: Qwen's render a
tool message as a user turn wrapped in ``<tool_response>`` and list the tools in the system
turn; SmolLM2's render a ``tool`` role of its own and drop ``tools=`` without a word, so the
model would never learn which tools exist or what they take.  So:

- ``tool_results_as_user``: a tool result is always a user turn wrapped in ``<tool_response>``
  (what Qwen's template makes of it), in process (``local.py``) and over HTTP (``wire.py``) alike;
- ``with_tools_in_system``: where a template ignores ``tools``, the schemas and the call format
  go into the system prompt itself (``tools_block``), laid out as Qwen's templates lay them out.

Free of mlx, torch and transformers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from .base import Message, ToolSchema

# A tool no template could mention unless it renders the tools it is given.
_PROBE = {"type": "function", "function": {"name": "frognano_probe_tool_x7", "description": "probe",
                                           "parameters": {"type": "object", "properties": {}}}}


def tool_results_as_user(messages: Sequence[Message]) -> list[Message]:
    """Each ``tool`` message as a user turn wrapped in ``<tool_response>`` (the harness's tool
    messages carry no ``tool_call_id``, which strict servers such as vLLM reject, and templates
    without a tool role render them unlike anything the model saw)."""
    return [
        {"role": "user", "content": f"<tool_response>\n{m.get('content', '')}\n</tool_response>"}
        if m.get("role") == "tool" else dict(m)
        for m in messages
    ]


def tools_block(tools: Sequence[ToolSchema]) -> str:
    """The tool schemas and the call format, as text for a system prompt."""
    schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one of these functions. Their signatures are inside <tools></tools>:\n"
            f"<tools>\n{schemas}\n</tools>\n\n"
            "For the call, return a JSON object with the function's name and arguments inside "
            "<tool_call></tool_call> tags:\n"
            '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def with_tools_in_system(messages: Sequence[Message], tools: Sequence[ToolSchema]) -> list[Message]:
    """``messages`` with ``tools_block(tools)`` appended to the system prompt (one is added
    when there is none)."""
    out = [dict(m) for m in messages]
    block = tools_block(tools)
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content', '')}\n\n{block}"
    else:
        out.insert(0, {"role": "system", "content": block})
    return out


def template_shows_tools(render: Callable[[list[Message], list[ToolSchema] | None], str]) -> bool:
    """Whether a chat template puts the tools it is given into the prompt: ``render(messages,
    tools)`` of a short conversation with a probe tool must name it."""
    messages: list[Message] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        return _PROBE["function"]["name"] in render(messages, [_PROBE])
    except Exception:  # noqa: BLE001 - a template that fails on tools does not show them
        return False


def prompt_messages(messages: Sequence[Message], tools: Sequence[ToolSchema] | None,
                    shows_tools: bool) -> tuple[list[Message], list[ToolSchema] | None]:
    """What to hand a chat template: tool results as user turns and, where the template does not
    show ``tools`` (``shows_tools`` False), the tools in the system prompt instead."""
    chat = tool_results_as_user(messages)
    if tools and not shows_tools:
        return with_tools_in_system(chat, tools), None
    return chat, list(tools) if tools else None


__all__ = ["prompt_messages", "template_shows_tools", "tool_results_as_user", "tools_block",
           "with_tools_in_system"]

