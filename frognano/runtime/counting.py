"""Token counts the server did not give: a prompt before it is sent, a reply it left uncounted.

A served model's tokenizer is the server's, and servers count only what they were sent: the
OpenAI-compatible backend needs a prompt's size *before* sending it (to keep ``max_tokens``
inside the context window), and llama-cpp-python's server reports no counts for a streamed reply
at all (it ignores ``stream_options.include_usage``), which would leave the episode's token
budget at zero forever.  ``TokenCounter`` fills both gaps:

- with ``tokenizer`` (a folder holding the model's tokenizer files, or the GGUF file the server
  serves): the model's own tokenizer, its chat template rendering the messages when it has one.
  Loading needs transformers (``frognano[torch]``) and a GGUF takes seconds, so it happens on
  first use;
- without it: an *estimate*, ``CHARS_PER_TOKEN`` characters a token plus a few tokens per message
  for the template's role markers.  A prompt count the server does report anchors it: the next
  prompt that starts with the same messages (the next turn of the same episode) is that count
  plus an estimate of the messages added since, so only the newest turn is ever guessed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import Message, ModelError, ToolSchema, one_line

log = logging.getLogger(__name__)

# SmolLM2's BPE (the Llama-style 49k vocabulary) reads FrogNano's system prompt, tool schemas and
# the bundled examples at 3.2 characters a token (2.7 to 3.8 per file); 3 errs towards counting
# more, so the budget trips a little early rather than the window overflowing.
CHARS_PER_TOKEN = 3.0
MESSAGE_OVERHEAD = 4  # a template's markers around one message (ChatML: <|im_start|>role\n ... <|im_end|>\n)


@dataclass(frozen=True)
class _Anchor:
    """A prompt the server counted: its first ``n`` messages (and tools) hash to ``key``."""

    n: int
    key: str
    tokens: int


class TokenCounter:
    """Counts tokens of chat prompts and reply texts; ``exact`` when a tokenizer was given."""

    def __init__(self, tokenizer: str | Path | None = None) -> None:
        self.path = Path(tokenizer).expanduser() if tokenizer else None
        if self.path is not None and not self.path.exists():
            raise ModelError(f"tokenizer {tokenizer}: no such file or folder (give the model's tokenizer folder "
                             "or its GGUF file)")
        self._anchor: _Anchor | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def exact(self) -> bool:
        return self.path is not None

    def text(self, text: str) -> int:
        """Tokens of ``text`` (a reply)."""
        if not text:
            return 0
        if self.path is not None:
            return len(self._load().encode(text, add_special_tokens=False))
        return max(1, round(len(text) / CHARS_PER_TOKEN))

    def prompt(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> int:
        """Tokens of the prompt ``messages`` (as sent) and ``tools`` make, with the assistant's opening."""
        if self.path is not None:
            tok = self._load()
            if getattr(tok, "chat_template", None):
                try:
                    rendered = tok.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                       add_generation_prompt=True)
                    return len(tok.encode(rendered, add_special_tokens=False))
                except Exception as exc:  # noqa: BLE001 - a template that refuses: count the parts
                    log.debug("the tokenizer's chat template refused the messages (%s); counting the parts", exc)
            parts = sum(len(tok.encode(_content(m), add_special_tokens=False)) for m in messages)
            schema = len(tok.encode(json.dumps(tools), add_special_tokens=False)) if tools else 0
            return parts + schema + MESSAGE_OVERHEAD * (len(messages) + 1)
        anchor = self._anchor
        if anchor is not None and len(messages) >= anchor.n and _key(messages[: anchor.n], tools) == anchor.key:
            return anchor.tokens + _estimate(messages[anchor.n:], None)
        return _estimate(messages, tools) + MESSAGE_OVERHEAD  # + the assistant's opening

    def learn(self, messages: list[Message], tools: list[ToolSchema] | None, prompt_tokens: int) -> None:
        """Anchor the estimate at a prompt the server counted (a tokenizer needs no anchor)."""
        if self.path is None and prompt_tokens > 0:
            self._anchor = _Anchor(len(messages), _key(messages, tools), prompt_tokens)

    def _load(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                assert self.path is not None
                try:
                    from transformers import AutoTokenizer
                except ImportError:
                    raise ModelError(f"tokenizer {self.path}: reading a tokenizer needs transformers "
                                     "(pip install 'frognano[torch]')") from None
                try:
                    if self.path.is_file():  # a GGUF: transformers reads the tokenizer from its metadata
                        self._tokenizer = AutoTokenizer.from_pretrained(
                            str(self.path.parent), gguf_file=self.path.name, local_files_only=True)
                    else:
                        self._tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
                except Exception as exc:  # noqa: BLE001 - any failure to read it is one line
                    raise ModelError(f"tokenizer {self.path}: cannot be read ({one_line(exc)})") from None
            return self._tokenizer


def _content(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content) if content is not None else ""


def _estimate(messages: list[Message], tools: list[ToolSchema] | None) -> int:
    chars = sum(len(_content(m)) for m in messages) + (len(json.dumps(tools)) if tools else 0)
    return round(chars / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD * len(messages)


def _key(messages: list[Message], tools: list[ToolSchema] | None) -> str:
    return hashlib.sha256(json.dumps([messages, tools], sort_keys=True, default=str).encode()).hexdigest()
