"""The tool-call grammar: an in-process model can only emit one well-formed tool call.

``ToolCallGrammar`` compiles, with xgrammar, the grammar of exactly one Qwen-style tool call
(``<tool_call>\\n{"name": <a tool>, "arguments": <JSON matching its parameters>}\\n</tool_call>``
and then end of turn) for one tokenizer; ``ToolCallMatcher`` walks it token by token and says
which tokens may come next.  The JSON is laid out as ``json.dumps`` and the chat template lay it
out (``", "`` and ``": "``, no other whitespace), so a constrained reply re-renders to the same
tokens in the next turn's prompt and the prompt cache keeps it.  ``tool_call_text`` writes a call
in that same text form (how ``http.py`` shows a server's structured calls to the harness).

Free of mlx and torch; xgrammar and numpy are imported only when a grammar is built.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from .base import one_line

OPEN_TAG = "<tool_call>"
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
