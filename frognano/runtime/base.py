"""The model protocol: chat messages and tool schemas in; text, token ids and counts out.

Backends (``mlx.py``, ``torch.py``, ``http.py``, ``replay.py``) implement ``Model``;
``load.load_model`` turns a ``SPEC`` from the command line (``mlx:PATH_OR_ID``,
``torch:PATH_OR_ID``, ``openai:MODEL@BASE_URL``, or ``replay:EPISODE.json`` to replay a
recorded episode) into one, importing only the backend it names.  This module imports no
backend: they all import it.  The runtime knows nothing of tests or repairs (docs/ARCHITECTURE.md §1).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..errors import UsageError

Message = dict[str, Any]  # {"role": "system"|"user"|"assistant"|"tool", "content": str, ...}
ToolSchema = dict[str, Any]  # OpenAI-style {"type": "function", "function": {"name", "description", "parameters"}}


class ModelError(UsageError):
    """A model that cannot be loaded or reached (bad path, not a model, dead endpoint): exit 2."""


class ContextOverflow(ModelError):
    """The prompt does not fit the model's context window.  The model works; this conversation
    has outgrown it, so the episode ends (``context_overflow``) and the next one starts small.
    ``cause`` is what the server (or the estimate) said; ``window`` the window, when known."""

    def __init__(self, message: str, cause: str = "", window: int | None = None) -> None:
        super().__init__(message)
        self.cause = cause or message
        self.window = window


def one_line(value: object, limit: int | None = 200) -> str:
    """``value`` (an exception, or text) as one line for an error message, cut at ``limit``.

    An exception without a message gives its type's name.
    """
    text = " ".join(str(value).split())
    if not text and isinstance(value, BaseException):
        text = type(value).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Sampling:
    """Decoding settings; every field has a default."""

    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    max_tokens: int = 512  # new tokens per turn
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    # Record each sampled token's log-probability in ``Generation.logprobs`` (in-process
    # backends; for RL training).  Off by default: serving pays nothing for it.
    logprobs: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise UsageError(f"temperature must not be negative, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise UsageError(f"max_tokens must be at least 1, got {self.max_tokens}")


@dataclass
class Generation:
    """One reply.  ``logprobs`` is filled only with ``Sampling(logprobs=True)`` by the in-process
    backends (``mlx.py``, ``torch.py``): one float per entry of ``token_ids``, the log of the
    probability the token had under the distribution it was actually drawn from:

    - softmax(logits / temperature), computed in float32;
    - restricted to the tokens the tool-call grammar allowed at that step and renormalised over
      them, when constrained decoding masked the logits;
    - after top-p truncation (renormalised over the nucleus) when ``top_p < 1``: RL training
      should sample with ``top_p = 1``, so that the recorded value is the policy's own
      log-probability;
    - greedy decoding (temperature 0) has no sampling distribution (the choice is certain): it
      records the temperature-1 log-probability, log-softmax of the raw logits renormalised
      over the allowed tokens, marked as such by ``temperature == 0`` in the ``Sampling`` used.

    Backends that do not see the sampling distribution (``http.py``: the server owns decoding;
    ``replay.py``: recorded text) leave it empty, as does every backend without
    ``Sampling(logprobs=True)``.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "cancelled"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list[float] = field(default_factory=list)  # see the class docstring; empty unless asked
    # With ``logprobs``, where a grammar constrained the reply (mlx and torch backends): per token, the
    # tokens it allowed at that step (numpy.packbits, little-endian; None: unconstrained), so a
    # trainer can renormalise over the same set.  Empty otherwise.
    allowed: list[bytes | None] = field(default_factory=list)


@runtime_checkable
class Model(Protocol):
    """A chat model.  ``generate`` is called once per assistant turn of an episode."""

    name: str

    def generate(
        self,
        messages: list[Message],
        tools: list[ToolSchema] | None = None,
        sampling: Sampling | None = None,
        *,
        on_text: Callable[[str], None] | None = None,  # streaming: called with each new piece of text
        cancel: threading.Event | None = None,  # set -> stop soon with finish_reason "cancelled"
        constrain: bool = True,  # in-process backends: only well-formed tool calls can be sampled
        # Names of the tools of ``tools`` the reply may call now (None: all).  The prompt still
        # shows every tool, so its text does not change from turn to turn; where decoding is
        # constrained, the grammar allows only these.  Others ignore it (the harness refuses).
        # A schema in place of a name narrows that tool's arguments in the grammar alone.
        offered: Sequence[str | ToolSchema] | None = None,
    ) -> Generation: ...

    def close(self) -> None: ...


def parse_spec(spec: str) -> tuple[str, str]:
    """``"mlx:path"`` -> ``("mlx", "path")``; a clear error for anything else."""
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in ("mlx", "torch", "openai", "replay") or not rest:
        raise UsageError(f"--model {spec!r}: expected mlx:PATH_OR_ID, torch:PATH_OR_ID, "
                         "openai:MODEL@BASE_URL or replay:EPISODE.json")
    return kind, rest

