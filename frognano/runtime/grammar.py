"""The tool-call grammar: an in-process model can only emit one well-formed tool call.

``ToolCallGrammar`` compiles, with xgrammar, the grammar of exactly one Qwen-style tool call
(``<tool_call>\\n{"name": <a tool>, "arguments": <JSON matching its parameters>}\\n</tool_call>``
and then end of turn) for one tokenizer; ``ToolCallMatcher`` walks it token by token and says
which tokens may come next.  The JSON is laid out as ``json.dumps`` and the chat template lay it
out (``", "`` and ``": "``, no other whitespace), so a constrained reply re-renders to the same
tokens in the next turn's prompt and the prompt cache keeps it.  ``tool_call_text`` writes a call
in that same text form (how ``http.py`` shows a server's structured calls to the harness).

A choice is left to the model only where calls can differ.  Text the grammar forces (the keys,
the punctuation, the rest of a name once it is determined) is forced as one split of tokens,
the longest pieces; and the tool's name is one token per tool still possible.  Otherwise the
model would spell one call many ways ("n" + "ame" or "name"), a sampler would spread a choice's
probability over its spellings, and a trainer would credit spellings instead of choices: with a
random tiny model, that was most of what a rollout's tokens were.

Free of mlx and torch; xgrammar and numpy are imported only when a grammar is built.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from .base import one_line

OPEN_TAG = "<tool_call>"
NAME_KEY = b'{"name": "'  # the call's first key, as the grammar lays it out
CLOSE_TAG = "</tool_call>"


def tool_call_text(name: str, arguments: Any) -> str:
    """One tool call in the text form the grammar allows and the harness parses."""
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN_TAG}\n{call}\n{CLOSE_TAG}"


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


def offered_tools(tools: Sequence[dict[str, Any]], offered: Sequence[str] | None) -> list[dict[str, Any]]:
    """The schemas of ``tools`` whose names ``offered`` lists (all of them when it is None)."""
    if offered is None:
        return list(tools)
    chosen = [t for t, fn in zip(tools, tool_functions(tools)) if fn["name"] in offered]
    if not chosen:
        raise UsageError(f"none of the tools is offered (offered: {', '.join(offered) or 'none'})")
    return chosen


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
        # Each ordinary token's bytes (the first id where several spell the same), for forcing
        # one split of the text the grammar forces (``ToolCallMatcher.allowed``).
        skip = set(self.banned) | set(stop_token_ids) | set(self.tags)
        self.pieces: dict[bytes, int] = {}
        self.spelling: list[bytes] = list(decoded[:vocab_size])
        for i, piece in enumerate(decoded[:vocab_size]):
            if piece and i not in skip:
                self.pieces.setdefault(piece, i)

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
        names = [fn["name"] for fn in tool_functions(tools)]
        return ToolCallMatcher(self.compile(tools), self.vocab_size, self.tags, self.banned, self.pieces,
                               self.spelling, names)


class ToolCallMatcher:
    """One generation's walk through the grammar.

    Call ``allowed()`` before each sampling step (a numpy bool mask over the vocabulary, or
    ``None`` once the call and its end-of-turn token are complete) and ``accept(token)`` after.
    """

    def __init__(
        self, compiled: Any, vocab_size: int, tags: dict[int, frozenset[int]] | None = None, banned: Sequence[int] = (),
        pieces: dict[bytes, int] | None = None, spelling: Sequence[bytes] = (), names: Sequence[str] = (),
    ) -> None:
        import numpy as np

        xgr = _import_xgrammar()
        self._np = np
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._vocab_size = vocab_size
        self._tags = tags or {}
        self._banned = np.asarray(list(banned), dtype=np.int64)
        self._pieces = pieces or {}
        self._longest = max(map(len, self._pieces), default=0)
        self._spelling = spelling or []
        self._names = [n.encode() for n in names]
        self._reply = bytearray()  # the bytes accepted until the tool's name is complete
        self._named = False  # its closing quote is out: nothing more to track (arguments can be long)

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
                return mask
        # Where the grammar forces the next characters (the JSON's keys and punctuation, the
        # rest of a tool name once its first piece is out), it would still let the model spell
        # them with any split the vocabulary has ("n" + "ame" or "name").  Such splits are no
        # choice: they change nothing in the call, yet a sampler draws them and a trainer would
        # credit them.  Forcing one split (xgrammar's jump-forward tokens: the longest pieces)
        # leaves the model choosing only where the call can differ: which tool, which arguments.
        forced = self._matcher.find_jump_forward_string().encode() if self._pieces else b""
        token = self._longest_piece(forced, mask)
        if token is not None:
            mask[:] = False
            mask[token] = True
            return mask
        # Choosing the tool is the same: "s", "su", "sub" and "submit" are one choice spelled
        # four ways, and a sampler (or a trainer) would split that choice's probability among
        # them.  Each tool still possible gets one token: the longest piece of the rest of its
        # name.  (Where one name ends and another goes on, the closing quote is a choice too,
        # and the grammar's mask is kept.)
        start = self._reply.find(NAME_KEY) if self._names and not self._named else -1
        if start >= 0:
            spelled = bytes(self._reply[start + len(NAME_KEY):])
            rests = [n[len(spelled):] for n in self._names if n.startswith(spelled)]
            if rests and all(rests):
                firsts = {self._longest_piece(rest, mask) for rest in rests} - {None}
                if firsts:
                    mask[:] = False
                    mask[sorted(firsts)] = True
        return mask

    def _longest_piece(self, text: bytes, mask) -> int | None:
        """The allowed token spelling the longest start of ``text`` (None: none does)."""
        for end in range(min(len(text), self._longest), 0, -1):
            token = self._pieces.get(text[:end])
            if token is not None and mask[token]:
                return token
        return None

    def accept(self, token_id: int) -> bool:
        if self.done:
            return True
        ok = self._matcher.accept_token(int(token_id))
        if ok and not self._named and 0 <= token_id < len(self._spelling):
            self._reply += self._spelling[token_id]
            start = self._reply.find(NAME_KEY)
            self._named = start >= 0 and b'"' in self._reply[start + len(NAME_KEY):]
        return ok
