"""What the in-process backends let out of a model: one well-formed tool call, and stop strings.

The pieces shared by ``mlx.py`` and ``torch.py``, all free of mlx and torch (plus the small
helpers both use to find and load a model folder):

* ``ToolCallGrammar`` compiles, with xgrammar, the grammar of exactly one Qwen-style tool call
  (``<tool_call>\\n{"name": <a tool>, "arguments": <JSON matching its parameters>}\\n</tool_call>``
  and then end of turn) for one tokenizer; ``ToolCallMatcher`` walks it token by token and says
  which tokens may come next.  The JSON is laid out as ``json.dumps`` and the chat template lay
  it out (``", "`` and ``": "``, no other whitespace), so a constrained reply re-renders to the
  same tokens in the next turn's prompt and the prompt cache keeps it.
* ``TextStream`` turns sampled token ids into text incrementally: it never releases half a UTF-8
  character, cuts the text at the first stop string, and holds back a tail that might still
  become one, so streamed text never shows a stop string.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .base import ModelError

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


def tool_functions(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``{"name", "parameters"}`` of each tool, from OpenAI-style or bare function schemas."""
    functions = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise UsageError(f"tool schema without a function name: {json.dumps(tool)[:120]}")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        functions.append({"name": fn["name"], "parameters": params})
    if not functions:
        raise UsageError("a constrained tool call needs at least one tool")
    return functions


def tool_call_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A JSON schema for ``{"name": ..., "arguments": ...}`` naming one of ``tools``."""
    cases = [
        {
            "type": "object",
            "properties": {"name": {"const": fn["name"]}, "arguments": fn["parameters"]},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for fn in tool_functions(tools)
    ]
    return cases[0] if len(cases) == 1 else {"anyOf": cases}


def _import_xgrammar():
    try:
        import xgrammar
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UsageError(
            f"constrained tool calls need xgrammar ({exc}): pip install xgrammar "
            "(it comes with frognano[mlx] and frognano[torch]), or pass constrain=False"
        ) from None
    return xgrammar


class ToolCallGrammar:
    """Compiled "one tool call" grammars for one tokenizer, cached by the tool list.

    ``tokenizer`` is a Hugging Face tokenizer; ``vocab_size`` the model's (the width of its
    logits, which may exceed the tokenizer's); ``stop_token_ids`` the end-of-turn tokens that
    may (and must) follow the closing tag.
    """

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        xgr = _import_xgrammar()
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids))
        self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        self._compiled: dict[str, Any] = {}
        # xgrammar matches added special tokens (<|im_start|>, ...) as their literal text, so
        # they could appear inside a JSON string; a real reply never contains them, and the next
        # turn would read them as control tokens.  The end-of-turn ids stay: the grammar itself
        # allows them only after the closing tag.
        special = set(getattr(tokenizer, "all_special_ids", ()) or ())
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        special.update(i for i, t in added.items() if getattr(t, "special", False))
        self.banned = sorted(i for i in special - set(stop_token_ids) if 0 <= i < vocab_size)
        # The tags are single added tokens in Qwen vocabularies.  Where the grammar demands a tag,
        # it would also let the model spell it piece by piece ("<", "tool", ...); forcing the
        # single token keeps the reply tokenised as the chat template will tokenise it in the next
        # turn (and as a trained model emits it).  ``tags`` maps each tag's id to the ids of the
        # tokens that spell a proper prefix of it.
        vocab = tokenizer.get_vocab()
        decoded = info.decoded_vocab
        self.tags: dict[int, frozenset[int]] = {}
        for tag in (OPEN_TAG, CLOSE_TAG):
            tag_id = vocab.get(tag)
            if tag_id is None or tag_id >= vocab_size:
                continue
            raw = tag.encode()
            self.tags[tag_id] = frozenset(
                i for i, piece in enumerate(decoded) if piece and len(piece) < len(raw) and raw.startswith(piece)
            )

    def compile(self, tools: Sequence[dict[str, Any]]) -> Any:
        key = json.dumps(tool_functions(tools), sort_keys=True)
        if key not in self._compiled:
            xgr = _import_xgrammar()
            schema = json.dumps(tool_call_schema(tools))
            try:
                body = xgr.Grammar.from_json_schema(
                    schema, any_whitespace=False, separators=(", ", ": "), strict_mode=True
                )
                grammar = xgr.Grammar.concat(
                    xgr.Grammar.from_ebnf(f"root ::= {json.dumps(OPEN_TAG + chr(10))}"),
                    body,
                    xgr.Grammar.from_ebnf(f"root ::= {json.dumps(chr(10) + CLOSE_TAG)}"),
                )
                self._compiled[key] = self._compiler.compile_grammar(grammar)
            except Exception as exc:  # xgrammar raises RuntimeError for schemas it cannot handle
                raise UsageError(f"cannot constrain to these tool schemas: {one_line(exc)}") from None
        return self._compiled[key]

    def matcher(self, tools: Sequence[dict[str, Any]]) -> ToolCallMatcher:
        return ToolCallMatcher(self.compile(tools), self.vocab_size, self.tags, self.banned)


class ToolCallMatcher:
    """One generation's walk through the grammar.

    Call ``allowed()`` before each sampling step (a numpy bool mask over the vocabulary, or
    ``None`` once the call and its end-of-turn token are complete) and ``accept(token)`` after.
    """

    def __init__(
        self, compiled: Any, vocab_size: int, tags: dict[int, frozenset[int]] | None = None, banned: Sequence[int] = ()
    ) -> None:
        import numpy as np

        xgr = _import_xgrammar()
        self._np = np
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._vocab_size = vocab_size
        self._tags = tags or {}
        self._banned = np.asarray(list(banned), dtype=np.int64)

    @property
    def done(self) -> bool:
        return self._matcher.is_terminated()

    def allowed(self):
        if self.done:
            return None
        np = self._np
        self._matcher.fill_next_token_bitmask(self._bitmask)
        bits = np.unpackbits(self._bitmask.numpy().view(np.uint8), bitorder="little")[: self._vocab_size]
        mask = bits.astype(bool)
        mask[self._banned] = False
        for tag, prefixes in self._tags.items():
            # Only where the grammar wants the tag itself: everything allowed spells a piece of it.
            if mask[tag] and mask.sum() <= len(prefixes) + 1 and prefixes.issuperset(
                int(i) for i in np.flatnonzero(mask) if i != tag
            ):
                mask[:] = False
                mask[tag] = True
                break
        return mask

    def accept(self, token_id: int) -> bool:
        if self.done:
            return True
        return self._matcher.accept_token(int(token_id))


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


# -- loading helpers shared by mlx.py and torch.py ---------------------------------------------

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolve_model_path(path_or_id: str, kind: str, *, download: bool = False) -> tuple[str, bool]:
    """``(where, is_local)`` for a model spec's path; a one-line ``ModelError`` naming it if none.

    An existing path must be a folder with a ``config.json``.  Anything else that looks like a
    Hugging Face Hub id (``owner/name``, not starting with ``.``, ``/`` or ``~``) is looked up in
    the local Hugging Face cache only: FrogNano is offline by default (DESIGN.md §2.4), so the
    hub itself is asked only with ``download=True`` or ``FROGNANO_ALLOW_DOWNLOAD=1``.
    """
    path = Path(path_or_id).expanduser()
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
            ids.update([eos] if isinstance(eos, int) else [i for i in (eos or []) if isinstance(i, int)])
    im_end = tokenizer.get_vocab().get("<|im_end|>")
    if im_end is not None:
        ids.add(int(im_end))
    return ids


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
