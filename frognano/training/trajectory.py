"""One episode as the token sequence the policy saw and sampled: what GRPO trains on.

A multi-turn episode is one sequence: the first prompt (system prompt, tool schemas and the
first observation, rendered by the chat template), then each assistant turn's *sampled* token
ids (trained: mask 1, with the log-probability each was sampled with), then the environment's
tokens up to the next generation prompt (the tool's reply and the template's markers: mask 0,
no loss).  The policy generates every turn from exactly this sequence (``LocalModel.generate``
asks ``prompt_for``), never from a re-tokenisation of the rendered chat: re-encoding the text of
a sampled turn can split it into other tokens than the ones sampled (constrained decoding
picks whatever split the grammar allows), and then the log-probabilities of the rollout would
not be those of the sequence the loss is computed on.

The environment's tokens are the text the chat template adds after the sequence so far: the
template renders the conversation including the latest tool reply, the sequence so far is
decoded (special tokens kept), and the rendered text must begin with it.  A template that
renders an earlier turn differently from what was sampled (one that drops reasoning from
earlier assistant turns, say) breaks that; the episode is then marked ``misaligned``, the
sequence continues from the re-encoded rendering (so the episode itself goes on as in
serving), and training leaves it out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Renderer", "Trajectory"]

log = logging.getLogger(__name__)


class Renderer(Protocol):
    """What a trajectory needs of the model: its chat template and tokenizer."""

    hf_tokenizer: Any

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> str: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass
class Trajectory:
    """The growing sequence of one episode."""

    prompt_len: int = 0  # tokens of the first prompt
    ids: list[int] = field(default_factory=list)  # the whole sequence
    mask: list[int] = field(default_factory=list)  # per token after the first prompt: 1 sampled, 0 environment
    logprobs: list[float] = field(default_factory=list)  # per token after the first prompt (0.0 where mask is 0)
    allowed: list[bytes | None] = field(default_factory=list)  # per token after the prompt: the grammar's mask
    turns: int = 0
    misaligned: bool = False  # the template re-rendered an earlier turn differently (module docstring)

    def prompt_for(self, model: Renderer, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The token ids the next turn is generated from."""
        text = model.render(messages, tools)
        if not self.ids:
            self.ids = _encode(model, text)
            self.prompt_len = len(self.ids)
            return list(self.ids)
        done = model.decode(self.ids)
        if not text.startswith(done):
            if not self.misaligned:
                log.info("the chat template re-renders an earlier turn differently; this episode is not trained on")
            self.misaligned = True
            # Go on as serving would (from the rendering); nothing of it is trained on.
            self.ids = _encode(model, text)
            self.prompt_len, self.mask, self.logprobs, self.allowed = len(self.ids), [], [], []
            return list(self.ids)
        env = _encode(model, text[len(done):])
        self.ids.extend(env)
        self.mask.extend([0] * len(env))
        self.logprobs.extend([0.0] * len(env))
        self.allowed.extend([None] * len(env))
        return list(self.ids)

    def record(self, token_ids: list[int], logprobs: list[float], allowed: list[bytes | None] | None = None) -> None:
        """The sampled tokens of one turn, the log-probability each was sampled with, and the
        grammar's mask each was drawn under (``Generation.allowed``; None: unconstrained)."""
        if len(logprobs) != len(token_ids) or (allowed is not None and len(allowed) != len(token_ids)):
            raise ValueError(f"{len(token_ids)} sampled tokens but {len(logprobs)} log-probabilities: "
                             "generate with Sampling(logprobs=True)")
        self.ids.extend(token_ids)
        self.mask.extend([1] * len(token_ids))
        self.logprobs.extend(logprobs)
        self.allowed.extend(allowed if allowed is not None else [None] * len(token_ids))
        self.turns += 1

    @property
    def prompt_ids(self) -> list[int]:
        return self.ids[: self.prompt_len]

    @property
    def completion_ids(self) -> list[int]:
        return self.ids[self.prompt_len:]


def _encode(model: Renderer, text: str) -> list[int]:
    return list(model.hf_tokenizer.encode(text, add_special_tokens=False))
