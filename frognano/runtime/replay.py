"""``replay:FILE``: a deterministic model that replays recorded assistant replies.

FILE is an episode record written by ``frognano fix --model`` (its assistant messages are
replayed in order) or a JSON list of reply strings.  It reproduces an episode exactly, which is
how tests drive the harness end to end and how a surprising episode is debugged.  Nothing is
sampled, so ``Generation.logprobs`` (and ``token_ids``) stay empty.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from .base import Generation, Message, ModelError, Sampling, ToolSchema


class ReplayModel:
    def __init__(self, replies: list[str], name: str = "replay") -> None:
        self.replies = list(replies)
        self.name = name
        self.position = 0

    @classmethod
    def load(cls, path: str, **_: object) -> "ReplayModel":
        file = Path(path).expanduser()
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelError(f"replay:{path}: no such file") from None
        except (OSError, ValueError) as exc:
            raise ModelError(f"replay:{path}: not a JSON file ({exc})") from None
        if isinstance(data, dict) and isinstance(data.get("messages"), list):
            replies = [m.get("content", "") for m in data["messages"] if m.get("role") == "assistant"]
        elif isinstance(data, list) and all(isinstance(r, str) for r in data):
            replies = data
        else:
            raise ModelError(f"replay:{path}: expected an episode record or a list of replies")
        return cls(replies, name=f"replay:{file.name}")

    def generate(self, messages: list[Message], tools: list[ToolSchema] | None = None,
                 sampling: Sampling | None = None, *, on_text: Callable[[str], None] | None = None,
                 cancel: threading.Event | None = None, constrain: bool = True,
                 offered: Sequence[str | ToolSchema] | None = None) -> Generation:
        if cancel is not None and cancel.is_set():
            return Generation("", finish_reason="cancelled")
        if self.position >= len(self.replies):
            raise ModelError(f"{self.name}: no more recorded replies after {len(self.replies)}")
        text = self.replies[self.position]
        self.position += 1
        if on_text is not None:
            on_text(text)
        # No tokenizer here: counts are whitespace words, enough for budgets in tests.
        prompt = sum(len(str(m.get("content", "")).split()) for m in messages)
        return Generation(text, [], "stop", prompt, len(text.split()))

    def close(self) -> None:
        pass
