"""The episode loop: a model and a ToolBox, from the first observation to a submitted patch.

Recoverable problems (a malformed call, a tool error) go back to the model as the next
observation and the episode goes on; terminal ones (submit, budgets, a model that cannot be
reached, cancellation, a model repeating itself) end it.  The record is written in ``finally``,
whatever happened.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from ..errors import FrogNanoError
from ..runtime.base import Model, Sampling
from .harness import MAX_CANDIDATES, SYSTEM_PROMPT, TOOL_NAMES, TOOLS, ToolBox, ToolError, parse_tool_call
from .patch import Patch

log = logging.getLogger(__name__)


class EpisodeStatus(StrEnum):
    """Why an episode ended (the values are what records and ``--json`` say)."""

    SUBMITTED = "submitted"  # the model called submit (offered only once a file is changed)
    TURNS = "turn_budget"
    TOKENS = "token_budget"
    LOOPING = "looping"  # the same call again and again
    MODEL_ERROR = "model_error"  # the model could not be loaded or reached
    CANCELLED = "cancelled"


@dataclass
class EpisodeConfig:
    max_turns: int = 16  # assistant turns
    max_tokens: int = 16384  # prompt + completion tokens over the whole episode
    repeat_limit: int = 3  # the same call this many times in a row ends the episode
    constrain: bool = True  # constrained tool-call decoding on in-process backends
    sampling: Sampling = field(default_factory=Sampling)
    # The harness's tools offered to the model (None: all of them).  Training a small model
    # can start with fewer (``candidates``, ``apply``, ``submit``): the same tools, the same
    # prompts and observations, a narrower choice.
    tools: tuple[str, ...] | None = None
    # Entries the ``candidates`` list holds at most; ``apply``'s schema (and so the grammar)
    # allows n up to it.  Serving lists up to MAX_CANDIDATES; training may list fewer.
    listed: int = MAX_CANDIDATES

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_tokens < 1 or self.repeat_limit < 2:
            raise FrogNanoError("max_turns and max_tokens must be positive, repeat_limit at least 2")
        unknown = sorted(set(self.tools or ()) - set(TOOL_NAMES))
        if unknown or self.tools == ():
            raise FrogNanoError(f"tools must name some of {', '.join(TOOL_NAMES)}; got {', '.join(unknown) or 'none'}")
        if self.tools is not None and not {"apply", "edit"} & set(self.tools):
            # submit is offered only once a file is changed (ToolBox.offered)
            raise FrogNanoError("tools must include apply or edit: without a change, nothing can be submitted")
        if not 1 <= self.listed <= MAX_CANDIDATES:
            raise FrogNanoError(f"listed must be between 1 and {MAX_CANDIDATES}, got {self.listed}")

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.schemas]

    @property
    def schemas(self) -> list[dict]:
        tools = TOOLS if self.tools is None else [t for t in TOOLS if t["function"]["name"] in self.tools]
        return tools if self.listed == MAX_CANDIDATES else [_bounded_apply(t, self.listed) for t in tools]


def _bounded_apply(tool: dict, listed: int) -> dict:
    """``tool``, or ``apply``'s schema with n at most ``listed`` (a copy; TOOLS stays as it is)."""
    if tool["function"]["name"] != "apply":
        return tool
    function = tool["function"]
    params = function["parameters"]
    n = {**params["properties"]["n"], "maximum": listed}
    return {**tool, "function": {**function, "parameters": {**params, "properties": {"n": n}}}}


@dataclass
class Turn:
    reply: str
    prompt_tokens: int
    completion_tokens: int
    call: dict | None  # the parsed call, or None when malformed
    result: str  # what went back to the model


@dataclass
class Episode:
    status: EpisodeStatus | None = None  # set when the episode ends
    patch: Patch | None = None
    turns: list[Turn] = field(default_factory=list)
    malformed: int = 0
    seconds: float = 0.0
    record: Path | None = None
    error: str = ""

    @property
    def tokens_in(self) -> int:
        return sum(t.prompt_tokens for t in self.turns)

    @property
    def tokens_out(self) -> int:
        return sum(t.completion_tokens for t in self.turns)


def turn_sampling(sampling: Sampling, turn: int) -> Sampling:
    """The sampling settings of an episode's ``turn``: a seeded episode draws each turn from its
    own stream (seed, turn).  Re-seeding every turn with the episode's seed would replay the same
    random numbers each turn, so a policy whose next choice barely depends on the context (an
    untrained one) would repeat its first choice and never explore an episode's other paths."""
    if sampling.seed is None or turn == 0:
        return sampling
    return replace(sampling, seed=(sampling.seed * 1_000_003 + turn) % (1 << 31))


def run_episode(model: Model, toolbox: ToolBox, observation: str, config: EpisodeConfig | None = None,
                *, record_dir: Path | None = None, cancel: threading.Event | None = None,
                meta: dict | None = None) -> Episode:
    config = config or EpisodeConfig()
    cancel = cancel or threading.Event()
    episode = Episode()
    messages: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT},
                            {"role": "user", "content": observation}]
    started = time.monotonic()
    last_key, repeats = None, 0
    try:
        for turn in range(config.max_turns):
            if cancel.is_set():
                episode.status = EpisodeStatus.CANCELLED
                break
            try:
                # Every tool is shown in the prompt (its text is the same at every turn); the
                # grammar lets the reply call only the ones that can do something now.
                gen = model.generate(messages, config.schemas, turn_sampling(config.sampling, turn), cancel=cancel,
                                     constrain=config.constrain, offered=toolbox.offered(config.names))
            except FrogNanoError as exc:
                episode.status, episode.error = EpisodeStatus.MODEL_ERROR, str(exc)
                break
            messages.append({"role": "assistant", "content": gen.text})
            if gen.finish_reason == "cancelled":
                episode.status = EpisodeStatus.CANCELLED
                break
            try:
                call = parse_tool_call(gen.text)
                if config.tools is not None and call.name not in config.tools:
                    raise ToolError(f"tool {call.name!r} is not offered here; tools: {', '.join(config.tools)}")
            except ToolError as exc:
                episode.malformed += 1
                reply, call = f"error: {exc}", None
                result_terminal = False
            else:
                result = toolbox.call(call)
                reply, result_terminal = result.text, result.terminal
            episode.turns.append(Turn(gen.text, gen.prompt_tokens, gen.completion_tokens,
                                      {"name": call.name, "arguments": call.arguments} if call else None, reply))
            if result_terminal:  # submit, which the toolbox accepts only with a change made
                episode.patch = toolbox.patch()
                episode.status = EpisodeStatus.SUBMITTED
                break
            key = call.key() if call else gen.text
            repeats = repeats + 1 if key == last_key else 1
            last_key = key
            if repeats >= config.repeat_limit:
                episode.status = EpisodeStatus.LOOPING
                break
            if episode.tokens_in + episode.tokens_out > config.max_tokens:
                episode.status = EpisodeStatus.TOKENS
                break
            messages.append({"role": "tool", "content": reply})
        else:
            episode.status = EpisodeStatus.TURNS
        if episode.status != EpisodeStatus.SUBMITTED:
            episode.patch = None
    finally:
        episode.seconds = time.monotonic() - started
        episode.status = episode.status or EpisodeStatus.MODEL_ERROR
        if record_dir is not None:
            episode.record = _save(record_dir, episode, messages, model, config, meta or {})
    return episode


def _save(record_dir: Path, episode: Episode, messages: list[dict], model: Model,
          config: EpisodeConfig, meta: dict) -> Path:
    record_dir.mkdir(parents=True, exist_ok=True)
    path = record_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**9:09d}.json"
    data = {
        "model": getattr(model, "name", type(model).__name__),
        "status": episode.status,
        "error": episode.error,
        "seconds": round(episode.seconds, 3),
        "malformed": episode.malformed,
        "tokens_in": episode.tokens_in,
        "tokens_out": episode.tokens_out,
        "config": {"max_turns": config.max_turns, "max_tokens": config.max_tokens,
                   "constrain": config.constrain, "sampling": asdict(config.sampling)},
        "messages": messages,
        "turns": [asdict(t) for t in episode.turns],
        "patch": episode.patch.diff() if episode.patch else None,
        **meta,
    }
    path.write_text(json.dumps(data, indent=1))
    return path
