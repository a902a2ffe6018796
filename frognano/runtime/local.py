"""What the in-process backends (``mlx.py``, ``torch.py``) share; free of mlx, torch and transformers.

``LocalModel`` is the part of a backend that does not touch its framework: the chat template
(``render``, ``encode_prompt``, ``decode``), the end-of-turn ids, the tool-call grammar, the
prompt cache kept between calls and the public ``generate``.  A backend adds its decode loop
(``_generate``) and the two cache operations its framework provides (``_new_cache``,
``_trim_cache``) — the mlx-lm way: the code that runs the model stays in the model's own file.

The prompt cache: an episode's prompts grow turn by turn (the previous prompt, the reply, the
tool result, ...), so each ``generate`` finds the longest common prefix of the new prompt and
the tokens the cache holds (``reusable_prefix``), trims the cache to it and feeds only the rest;
a prompt that shares nothing (a new episode with another system prompt) starts afresh.
``last_prompt_processed`` / ``last_prompt_reused`` say how many prompt tokens the last call ran
through the model and took from the cache.

``Turn`` is one reply's bookkeeping inside a decode loop (end of turn, stop strings, streaming,
cancel); ``TextStream`` turns sampled token ids into text incrementally: it never releases half a
UTF-8 character, cuts the text at the first stop string, and holds back a tail that might still
become one, so streamed text never shows a stop string.  ``resolve_model_path`` and
``end_of_turn_ids`` find a model folder and its end-of-turn tokens.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ..errors import UsageError
from .base import Generation, Message, ModelError, Sampling, ToolSchema, one_line
from .grammar import ToolCallGrammar, ToolCallMatcher, offered_tools
from .prompt import prompt_messages, template_shows_tools


class LocalModel(abc.ABC):
    """The framework-free half of an in-process ``base.Model`` (see the module docstring).

    Subclasses set ``KIND`` ("mlx", "torch") and ``OPTIONS`` (the keyword options ``load``
    accepts) and implement ``_generate``, ``_new_cache`` and ``_trim_cache``.
    """

    KIND: ClassVar[str]
    OPTIONS: ClassVar[set[str]]

    def __init__(
        self, name: str, hf_tokenizer: Any, *, vocab_size: int, eos_token_ids: set[int], cache_prompt: bool = True
    ) -> None:
        self.name = name
        self.hf_tokenizer = hf_tokenizer  # a Hugging Face tokenizer: the chat template lives here
        self.vocab_size = vocab_size  # the width of the logits (may exceed the tokenizer's)
        self.eos_token_ids = eos_token_ids
        self.cache_prompt = cache_prompt
        self._grammar: ToolCallGrammar | None = None
        self._shows_tools: bool | None = None  # template_shows_tools, once asked
        self._lock = threading.Lock()
        self._cache: Any = None  # the framework's KV cache, or None
        self._cached: list[int] = []  # the tokens whose keys and values the cache holds
        self.last_prompt_processed = 0  # prompt tokens run through the model by the last call
        self.last_prompt_reused = 0  # prompt tokens the last call took from the cache
        # While set (``recording``), turns are generated from this growing token sequence and
        # every sampled token is recorded in it (``training/trajectory.py``).
        self.trajectory: Any = None

    # -- loading --------------------------------------------------------------------------

    @classmethod
    def _resolve(cls, path_or_id: str, options: dict[str, Any]) -> tuple[str, bool]:
        """Check ``options`` against ``OPTIONS``, take ``download`` out, and find the model."""
        unknown = set(options) - cls.OPTIONS
        if unknown:
            known = ", ".join(sorted(cls.OPTIONS))
            raise UsageError(f"unknown {cls.KIND} model option(s): {', '.join(sorted(unknown))} (known: {known})")
        return resolve_model_path(path_or_id, cls.KIND, download=bool(options.pop("download", False)))

    @classmethod
    def _load_failed(cls, path_or_id: str, local: bool, exc: BaseException) -> ModelError:
        where = "" if local else " (not a local folder, and the Hugging Face Hub could not provide it)"
        return ModelError(f"{cls.KIND}:{path_or_id}: cannot load the model{where}: {one_line(exc)}")

    # -- prompts --------------------------------------------------------------------------

    def render(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> str:
        """The chat template applied to ``messages`` (and ``tools``), ready for the reply.

        Tool results are user turns and, where the template ignores ``tools``, the tools are in
        the system prompt (``prompt.py``): the same text the HTTP backend sends a server.
        """
        chat, shown = prompt_messages(messages, tools, self.template_shows_tools)
        try:
            return self._apply_template(chat, shown)
        except Exception as exc:
            raise UsageError(f"{self.name}: cannot render the chat template: {one_line(exc)}") from None

    def _apply_template(self, messages: list[Message], tools: list[ToolSchema] | None) -> str:
        return self.hf_tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False
        )

    @property
    def template_shows_tools(self) -> bool:
        """Whether the chat template lists the tools it is given (SmolLM2's does not)."""
        if self._shows_tools is None:
            self._shows_tools = template_shows_tools(self._apply_template)
        return self._shows_tools

    def encode_prompt(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> list[int]:
        return list(self.hf_tokenizer.encode(self.render(messages, tools), add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.hf_tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    # -- the prompt cache -----------------------------------------------------------------

    def reset_cache(self) -> None:
        with self._lock:
            self._cache, self._cached = None, []

    @abc.abstractmethod
    def _new_cache(self) -> Any:
        """An empty prompt cache of the backend's kind."""

    @abc.abstractmethod
    def _trim_cache(self, n: int) -> bool:
        """Drop the last ``n`` tokens from the cache; False where the cache cannot."""

    def _prepare_cache(self, prompt: list[int]) -> list[int]:
        """Make the cache hold a prefix of ``prompt``; return the tokens still to feed."""
        usable = self.cache_prompt and self._cache is not None
        keep = reusable_prefix(self._cached, prompt, self._trim_cache) if usable else 0
        if keep <= 0:
            self._cache, keep = self._new_cache(), 0
        self._cached = list(prompt[:keep])
        self.last_prompt_reused = keep
        self.last_prompt_processed = len(prompt) - keep
        return prompt[keep:]

    # -- generation -----------------------------------------------------------------------

    def generate(
        self,
        messages: list[Message],
        tools: list[ToolSchema] | None = None,
        sampling: Sampling | None = None,
        *,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
        constrain: bool = True,
        offered: Sequence[str | ToolSchema] | None = None,
    ) -> Generation:
        sampling = sampling or Sampling()
        trajectory = self.trajectory
        if trajectory is not None:  # an RL rollout: the sequence itself, not a re-encoding of the chat
            sampling = dataclasses.replace(sampling, logprobs=True)
            prompt = trajectory.prompt_for(self, messages, tools)
        else:
            prompt = self.encode_prompt(messages, tools)
        if not prompt:
            raise UsageError(f"{self.name}: the rendered prompt is empty")
        with self._lock, self._decoding():
            if cancel is not None and cancel.is_set():
                return Generation("", finish_reason="cancelled", prompt_tokens=len(prompt))
            try:
                matcher = self._matcher(offered_tools(tools, offered)) if constrain and tools else None
                turn = Turn(self.decode, sampling.stop, self.eos_token_ids, on_text, cancel)
                gen = self._generate(prompt, sampling, matcher, turn)
                if trajectory is not None:
                    trajectory.record(gen.token_ids, gen.logprobs, gen.allowed or None)
                return gen
            except BaseException:
                self._cache, self._cached = None, []  # the cache's state is unknown now
                raise

    @contextlib.contextmanager
    def recording(self, trajectory: Any) -> Iterator[Any]:
        """Generate the turns inside the block from ``trajectory`` (an RL rollout), recording
        what is sampled; the prompt cache starts empty (the weights may have changed since)."""
        self.reset_cache()
        self.trajectory = trajectory
        try:
            yield trajectory
        finally:
            self.trajectory = None

    def _decoding(self) -> contextlib.AbstractContextManager[Any]:
        """The framework's context for a decode loop (torch: inference mode)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def _generate(
        self, prompt: list[int], sampling: Sampling, matcher: ToolCallMatcher | None, turn: Turn
    ) -> Generation:
        """The decode loop: feed ``turn`` sampled tokens until it says stop (or ``max_tokens``).

        Runs under the lock; leaves ``_cached`` naming exactly what the cache then holds.
        """

    def _matcher(self, tools: list[ToolSchema]) -> ToolCallMatcher:
        if self._grammar is None:
            # A constrained reply ends with the token the chat template closes an assistant turn
            # with (``<|im_end|>`` in Qwen's), not any end-of-sequence id: a reply ended by
            # ``<|endoftext|>`` is re-rendered with ``<|im_end|>`` next turn, so the tokens a
            # rollout sampled would no longer be the ones its context holds.
            im_end = self.hf_tokenizer.get_vocab().get("<|im_end|>")
            stops = [im_end] if im_end in self.eos_token_ids else sorted(self.eos_token_ids)
            self._grammar = ToolCallGrammar(self.hf_tokenizer, self.vocab_size, stops)
        return self._grammar.matcher(tools)

    def close(self) -> None:
        with self._lock:
            self._cache, self._cached = None, []
            self._grammar = None


class Turn:
    """One reply as a decode loop produces it: token ids in, streamed text and a ``Generation`` out."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        stop: Sequence[str],
        eos_token_ids: set[int],
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.stream = TextStream(decode, stop)
        self.ids: list[int] = []
        self.logprobs: list[float] = []  # one per id when the decode loop records them
        self.allowed: list[bytes | None] = []  # with them: each step's grammar mask, packed
        self.finish_reason = "length"  # unless an end of turn, a stop string or a cancel comes first
        self._eos = eos_token_ids
        self._on_text = on_text
        self._cancel = cancel

    def take(self, token: int, logprob: float | None = None, allowed: Any = None) -> bool:
        """Record a sampled token (and its log-probability, if recorded, and the grammar's mask
        it was drawn under: a numpy bool array, None when unconstrained); True when the reply
        ends with it."""
        self.ids.append(token)
        if logprob is not None:
            self.logprobs.append(logprob)
            self.allowed.append(None if allowed is None else _pack(allowed))
        if token in self._eos:
            self.finish_reason = "stop"
            return True
        piece = self.stream.feed(token)
        if piece and self._on_text is not None:
            self._on_text(piece)
        if self.stream.stopped:
            self.finish_reason = "stop"
            return True
        if self._cancel is not None and self._cancel.is_set():
            self.finish_reason = "cancelled"
            return True
        return False

    def end(self, prompt_tokens: int) -> Generation:
        """Release the held-back text and sum the reply up."""
        rest = self.stream.finish()
        if rest and self._on_text is not None:
            self._on_text(rest)
        return Generation(self.stream.text, token_ids=self.ids, finish_reason=self.finish_reason,
                          prompt_tokens=prompt_tokens, completion_tokens=len(self.ids), logprobs=self.logprobs,
                          allowed=self.allowed if any(a is not None for a in self.allowed) else [])


def _pack(mask: Any) -> bytes:
    """A bool mask over the vocabulary as little-endian packed bits (``Generation.allowed``)."""
    import numpy as np

    return np.packbits(np.asarray(mask, dtype=bool), bitorder="little").tobytes()


class TextStream:
    """Incremental detokenisation with stop strings (see the module docstring).

    ``feed(token_id)`` returns the text released by that token; ``finish()`` the held-back rest
    when generation ends without a stop string; ``text`` is everything before the stop string.
    """

    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stop = [s for s in stop if s]
        self._longest = max((len(s) for s in self._stop), default=0)
        self._window: list[int] = []  # tokens since the last complete character
        self._text = ""
        self._released = 0
        self.stopped = False

    @property
    def text(self) -> str:
        return self._text

    def feed(self, token_id: int) -> str:
        if self.stopped:
            return ""
        self._window.append(token_id)
        piece = self._decode(self._window)
        # A byte-level token can end inside a UTF-8 character; wait for the rest (at most 4 bytes).
        if piece.endswith("\ufffd") and len(self._window) < 4:
            return ""
        self._window = []
        scan_from = max(0, len(self._text) - self._longest + 1)
        self._text += piece
        if self._stop:
            hits = [i for i in (self._text.find(s, scan_from) for s in self._stop) if i >= 0]
            if hits:
                self._text = self._text[: min(hits)]
                self.stopped = True
                return self._release(len(self._text))
        return self._release(len(self._text) - self._partial_stop())

    def finish(self) -> str:
        if self._window and not self.stopped:
            self._text += self._decode(self._window)
            self._window = []
        return self._release(len(self._text))

    def _partial_stop(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        for n in range(min(self._longest - 1, len(self._text)), 0, -1):
            tail = self._text[-n:]
            if any(s.startswith(tail) for s in self._stop):
                return n
        return 0

    def _release(self, upto: int) -> str:
        if upto <= self._released:
            return ""
        out = self._text[self._released : upto]
        self._released = upto
        return out


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def reusable_prefix(cached: Sequence[int], prompt: Sequence[int], trim: Callable[[int], bool]) -> int:
    """How many leading tokens of ``prompt`` a KV cache holding ``cached`` can keep (0: start anew).

    ``trim(n)`` drops the last ``n`` tokens from the cache and says whether it could.  The last
    prompt token is always fed again: its logits start the reply.
    """
    keep = min(common_prefix_len(cached, prompt), len(prompt) - 1)
    if 0 < keep < len(cached) and not trim(len(cached) - keep):
        return 0
    return max(keep, 0)


# -- finding a model folder --------------------------------------------------------------------

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_model_path(path_or_id: str, kind: str, *, download: bool = False,
                       convert: bool = True) -> tuple[str, bool]:
    """``(where, is_local)`` for a model spec's path; a one-line ``ModelError`` naming it if none.

    An existing path must be a folder with a ``config.json``.  Anything else that looks like a
    Hugging Face Hub id (``owner/name``, not starting with ``.``, ``/`` or ``~``) is looked up in
    the local Hugging Face cache only: FrogNano is offline by default (docs/ARCHITECTURE.md, invariant 4), so the
    hub itself is asked only with ``download=True`` or ``FROGNANO_ALLOW_DOWNLOAD=1``.  A GGUF
    file (``*.gguf``, or any file starting with GGUF's magic bytes, as Ollama's blobs do) is
    converted once into FrogNano's cache and that folder is returned (``gguf.cached_import``);
    with ``convert=False`` (a preflight check) its header is checked and the file returned.
    """
    from .gguf import cached_import, is_gguf_path, read_header  # light: converters load to convert

    path = Path(path_or_id).expanduser()
    if is_gguf_path(path):
        if not convert:
            read_header(path)
            return str(path), True
        return str(cached_import(path, kind)), True
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"{kind}:{path_or_id}: not a model folder (it is a file)")
        if not (path / "config.json").is_file():
            raise ModelError(f"{kind}:{path_or_id}: not a model folder (no config.json in {path})")
        return str(path), True
    if not (_HUB_ID.match(path_or_id) and not path_or_id.startswith((".", "/", "~"))):
        raise ModelError(f"{kind}:{path_or_id}: no such model folder ({path} does not exist)")
    if download or os.environ.get("FROGNANO_ALLOW_DOWNLOAD") == "1":
        return path_or_id, False
    try:
        from huggingface_hub import snapshot_download

        cached = Path(snapshot_download(path_or_id, local_files_only=True))
    except Exception:
        cached = None
    if cached is None or not (cached / "config.json").is_file():
        raise ModelError(
            f"{kind}:{path_or_id}: no such model folder, and no Hugging Face model of that id in the local cache "
            f"(fetch it with `hf download {path_or_id}`, or set FROGNANO_ALLOW_DOWNLOAD=1)"
        )
    return str(cached), True


def end_of_turn_ids(path: str | None, tokenizer: Any, configured: set[int]) -> set[int]:
    """End-of-turn tokens: the configured EOS ids, generation_config's, and ``<|im_end|>``."""
    ids = set(configured)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if path is not None:
        gen = Path(path) / "generation_config.json"
        if gen.is_file():
            try:
                eos = json.loads(gen.read_text()).get("eos_token_id")
            except (OSError, ValueError):
                eos = None
            ids.update(int_ids(eos))
    im_end = tokenizer.get_vocab().get("<|im_end|>")
    if im_end is not None:
        ids.add(int(im_end))
    return ids


def int_ids(value: Any) -> list[int]:
    """A config's ``eos_token_id``: one id, a list of them, or None."""
    return [value] if isinstance(value, int) else [i for i in (value or []) if isinstance(i, int)]
