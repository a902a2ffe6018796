"""The episode loop: a model and a ToolBox, from the first observation to a submitted patch.

Recoverable problems (a malformed call, a tool error) go back to the model as the next
observation and the episode goes on; terminal ones (submit, budgets, a model that cannot be
reached, cancellation, a model repeating itself) end it.  The record is written in ``finally``,
whatever happened.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from ..errors import FrogNanoError
from ..runtime.base import ContextOverflow, Model, Sampling
from .harness import (MAX_CANDIDATES, SYSTEM_PROMPT, TOOL_NAMES, TOOLS, ToolBox, ToolCall, ToolError,
                      parse_tool_call)
from .patch import Patch

log = logging.getLogger(__name__)


class EpisodeStatus(StrEnum):
    """Why an episode ended (the values are what records and ``--json`` say)."""

    SUBMITTED = "submitted"  # the model called submit (offered only once a file is changed)
    TURNS = "turn_budget"
    TOKENS = "token_budget"
    LOOPING = "looping"  # the same call with nothing changed, or malformed replies, again and again
    MODEL_ERROR = "model_error"  # the model could not be loaded or reached
    CONTEXT_OVERFLOW = "context_overflow"  # the conversation outgrew the model's context window
    CANCELLED = "cancelled"


@dataclass
class EpisodeConfig:
    max_turns: int = 16  # assistant turns
    max_tokens: int = 16384  # prompt + completion tokens over the whole episode
    # The same call in the same state (no file changed since) this many times ends the
    # episode: the first repeat is answered "nothing has changed", the second ends it.  So do
    # this many malformed replies in a row that get the same error (its numbers aside).
    repeat_limit: int = 3
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
    return _apply_with(tool, {**tool["function"]["parameters"]["properties"]["n"], "maximum": listed})


def _apply_with(tool: dict, n: dict) -> dict:
    """A copy of ``apply``'s schema ``tool`` whose argument n has the schema ``n``."""
    function = tool["function"]
    params = function["parameters"]
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


# Tools offered once per state of the files: ``candidates`` (argument-free) says nothing new
# until a file changes, and after any ``run_tests`` the next useful call changes a file or
# submits.  Offered run_tests again, SmolLM2-135M ran the failing tests three or four times in a
# row in 14-19 of 24 training episodes a step and ended looping; masked, it read, searched,
# edited and applied instead (measured on 32 episodes; untrained, it still resolved none).
ANSWERED_ONCE = frozenset({"run_tests", "candidates"})


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
    # The first observation is the run of the unchanged files, so run_tests starts answered.
    memory = _Memory(answered={("run_tests", toolbox.state())})
    record = _record_path(record_dir) if record_dir is not None else None
    try:
        for turn in range(config.max_turns):
            if cancel.is_set():
                episode.status = EpisodeStatus.CANCELLED
                break
            try:
                gen = _generate(model, messages, config, toolbox, memory, turn, cancel)
            except ContextOverflow as exc:  # the model works: this episode is over, the next starts small
                episode.status, episode.error = EpisodeStatus.CONTEXT_OVERFLOW, str(exc)
                break
            except FrogNanoError as exc:
                episode.status, episode.error = EpisodeStatus.MODEL_ERROR, str(exc)
                break
            if gen.finish_reason == "cancelled":
                messages.append({"role": "assistant", "content": gen.text})
                episode.status = EpisodeStatus.CANCELLED
                break
            answer = _respond(gen, config, toolbox, memory)  # recoverable problems become the reply
            episode.malformed += answer.call is None
            messages.append({"role": "assistant", "content": answer.shown})
            episode.turns.append(Turn(gen.text, gen.prompt_tokens, gen.completion_tokens,
                                      {"name": answer.call.name, "arguments": answer.call.arguments}
                                      if answer.call else None, answer.reply))
            if answer.terminal:  # submit, which the toolbox accepts only with a change made
                episode.patch = toolbox.patch()
                episode.status = EpisodeStatus.SUBMITTED
                break
            if answer.repeats >= config.repeat_limit:
                episode.status = EpisodeStatus.LOOPING
                break
            if episode.tokens_in + episode.tokens_out > config.max_tokens:
                episode.status = EpisodeStatus.TOKENS
                break
            messages.append({"role": "tool", "content": answer.reply})
            if record is not None:  # as it goes: a process killed mid-episode still leaves its record
                _save(record, episode, messages, model, config, meta or {}, started)
        else:
            episode.status = EpisodeStatus.TURNS
        if episode.status != EpisodeStatus.SUBMITTED:
            episode.patch = None
    except BaseException:  # an interrupt (Ctrl-C, SIGTERM as SystemExit): the record says so
        episode.status = episode.status or EpisodeStatus.CANCELLED
        raise
    finally:
        episode.seconds = time.monotonic() - started
        episode.status = episode.status or EpisodeStatus.MODEL_ERROR
        if record is not None:
            episode.record = _save(record, episode, messages, model, config, meta or {}, started)
    return episode


@dataclass
class _Answer:
    """What goes back for one reply: the call (None: malformed), the reply as the conversation
    keeps it, the answer, whether it ends the episode, and how often it was made in a row."""

    call: ToolCall | None
    shown: str
    reply: str
    terminal: bool
    repeats: int  # the same call in the same state, or the same malformed reply in a row


@dataclass
class _Memory:
    """What the loop remembers between turns."""

    # (call, state of the files) -> (times made, its answer)
    seen: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    # ANSWERED_ONCE calls already answered in a state of the files: the grammar stops offering
    # them there (invalid-action masking, as ToolBox.offered does for submit).
    answered: set[tuple[str, int]] = field(default_factory=set)
    malformed_run: int = 0  # malformed replies in a row with the same error (numbers aside)
    last_error: str = ""


def _generate(model: Model, messages: list[dict], config: EpisodeConfig, toolbox: ToolBox, memory: _Memory,
              turn: int, cancel: threading.Event):
    """The model's next reply.  Every tool is shown in the prompt (its text is the same at every
    turn); the grammar lets the reply call only the ones that can do something now."""
    offered: list = [n for n in toolbox.offered(config.names) if (n, toolbox.state()) not in memory.answered]
    offered = _narrowed(offered or config.names, config.schemas, toolbox)
    return model.generate(messages, config.schemas, turn_sampling(config.sampling, turn), cancel=cancel,
                          constrain=config.constrain, offered=offered)


def _respond(gen, config: EpisodeConfig, toolbox: ToolBox, memory: _Memory) -> _Answer:
    """The answer to a reply: a malformed one gets a one-line error; a call is run, unless the
    same call was answered in the same state of the files (then that answer, said once)."""
    try:
        call = parse_tool_call(gen.text)
        if config.tools is not None and call.name not in config.tools:
            raise ToolError(f"tool {call.name!r} is not offered here; tools: {', '.join(config.tools)}")
    except ToolError as exc:
        shown = gen.text
        if gen.finish_reason == "length":
            # A reply cut at the token limit is mostly filler (a string or a list that never
            # closed): keeping it whole would make every later prompt pay for it.
            shown = _cut(gen.text)
            reply = (f"error: the reply was cut off at {gen.completion_tokens} tokens, inside the tool call; "
                     "make the call shorter")
        else:
            reply = f"error: {exc}"
        error = re.sub(r"\d+", "N", reply)
        memory.malformed_run = memory.malformed_run + 1 if error == memory.last_error else 1
        memory.last_error = error
        return _Answer(None, shown, reply, False, memory.malformed_run)
    memory.malformed_run, memory.last_error = 0, ""
    state = (call.key(), toolbox.state())
    times, before = memory.seen.get(state, (0, ""))
    if times:
        # The same call with nothing changed since gets the same answer: said once without
        # running it again, and the next such call ends the episode.
        reply, terminal = (f"note: you made this call before and nothing has changed since; "
                           f"the result is the same (call another tool):\n{before}"), False
    else:
        result = toolbox.call(call)
        reply, terminal = result.text, result.terminal
        before = reply
    memory.seen[state] = (times + 1, before)
    if call.name in ANSWERED_ONCE and (call.name == "run_tests" or not call.arguments):
        memory.answered.add((call.name, toolbox.state()))
    if toolbox.state() in toolbox.tested:  # apply runs the failing tests too
        memory.answered.add(("run_tests", toolbox.state()))
    return _Answer(call, gen.text, reply, terminal, times + 1)


def _narrowed(offered: list, schemas: list[dict], toolbox: ToolBox) -> list:
    """``offered`` with ``apply`` narrowed to the candidates not yet tried (its schema with an
    ``enum`` of their numbers, for the grammar alone: the prompt keeps the full schema, so its
    text and cache stay the same from turn to turn).  Told that candidate 1 failed, SmolLM2-135M
    applied candidate 1 again and again until the episode ended as looping."""
    if "apply" not in offered or not toolbox.tried:
        return offered
    schema = next(t for t in schemas if t["function"]["name"] == "apply")
    narrowed = _apply_with(schema, {"type": "integer", "enum": toolbox.untried()})
    return [narrowed if name == "apply" else name for name in offered]


def _cut(text: str, keep: int = 160) -> str:
    return text if len(text) <= keep else text[:keep] + f"... [cut: {len(text) - keep} more characters]"


def _record_path(record_dir: Path) -> Path:
    return record_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**9:09d}.json"


def _save(path: Path, episode: Episode, messages: list[dict], model: Model,
          config: EpisodeConfig, meta: dict, started: float) -> Path:
    """Write the episode's record to ``path`` (atomically: a reader never sees half of it).
    While the episode runs its status is ``running``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "model": getattr(model, "name", type(model).__name__),
        "status": episode.status or "running",
        "error": episode.error,
        "seconds": round(episode.seconds or time.monotonic() - started, 3),
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
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
    return path
