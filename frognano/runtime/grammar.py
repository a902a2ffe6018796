"""The tool-call grammar: an in-process model can only emit one well-formed tool call.

``ToolCallGrammar`` compiles, with xgrammar, the grammar of exactly one Qwen-style tool call
(``<tool_call>\\n{"name": <a tool>, "arguments": <JSON matching its parameters>}\\n</tool_call>``
and then end of turn) for one tokenizer; ``ToolCallMatcher`` walks it token by token and says
which tokens may come next.  The JSON is laid out as ``json.dumps`` and the chat template lay it
out (``", "`` and ``": "``, no other whitespace), so a constrained reply re-renders to the same
tokens in the next turn's prompt and the prompt cache keeps it.  ``tool_call_text`` writes a call
in that same text form (how ``http.py`` shows a server's structured calls to the harness).

A choice is left to the model only where calls can differ, and the tokens are the ones the
model's own tokenizer would write.  Text the grammar forces (the keys, the punctuation, the rest
of a name once it is determined) is emitted as the tokenizer's encoding of the reply so far plus
that text, one token at a time; where the last of those tokens could merge with what the model
chooses next (`` {`` + ``"`` is `` {"`` in a byte-level BPE), the model chooses among the
merged tokens and the bare one (offered only where some continuation leaves it as the tokenizer
would), so the boundary falls where the tokenizer puts it.  The tool's name is one token per
tool still possible: the first token of the tokenizer's encoding of the rest of each name.
Otherwise the model would spell one call many ways ("n" + "ame" or "name"), a sampler would
spread a choice's probability over its spellings, a trainer would credit spellings instead of
choices, and a pretrained model would be driven through token sequences it never saw (and the
next turn's re-encoded prompt would part from the prompt cache at the first odd split).

Arrays are bounded (``bounded_schema``: a selection of at most ``MAX_ITEMS`` ids) and strings
by the reply's budget: near its end a reply is steered to close (``ToolCallMatcher.closing``:
the string's quote, then its brackets), so a constrained reply always closes.

Free of mlx and torch; xgrammar and numpy are imported only when a grammar is built.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from .base import one_line

OPEN_TAG = "<tool_call>"
MAX_ITEMS = 16  # entries of an array argument (a test selection)
# Tokens before the end of a reply's budget at which a constrained reply is steered to close
# (``ToolCallMatcher.closing``): the longest closing of a harness call (an edit with its last
# two strings still to open and close) takes fewer.
CLOSE_MARGIN = 24
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


def offered_tools(tools: Sequence[dict[str, Any]], offered: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The schemas of ``tools`` whose names ``offered`` lists (all of them when it is None).  An
    entry of ``offered`` may be a tool schema instead of a name: it replaces that tool's schema
    in the grammar for this reply (the harness narrows ``apply`` to the candidates not yet
    tried), while the prompt keeps rendering ``tools`` as they are."""
    if offered is None:
        return list(tools)
    narrowed = {tool_functions([o])[0]["name"]: o for o in offered if isinstance(o, dict)}
    names = {o for o in offered if isinstance(o, str)} | set(narrowed)
    chosen = [narrowed.get(fn["name"], t) for t, fn in zip(tools, tool_functions(tools)) if fn["name"] in names]
    if not chosen:
        raise UsageError(f"none of the tools is offered (offered: {', '.join(sorted(names)) or 'none'})")
    return chosen


def tool_call_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A JSON schema for ``{"name": ..., "arguments": ...}`` naming one of ``tools``."""
    cases = [
        {
            "type": "object",
            "properties": {"name": {"const": fn["name"]}, "arguments": bounded_schema(fn["parameters"])},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for fn in tool_functions(tools)
    ]
    return cases[0] if len(cases) == 1 else {"anyOf": cases}


def bounded_schema(schema: Any) -> Any:
    """``schema`` with every array bounded (``MAX_ITEMS``, where it has no bound: unbounded, a weak
    model fills a selection with the same id until its token budget runs out, and the reply never
    closes); strings are left to the reply's budget (see below)."""
    if isinstance(schema, list):
        return [bounded_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded_schema(v) for k, v in schema.items()}
    if out.get("type") == "array":
        out.setdefault("maxItems", MAX_ITEMS)
    # Strings get no bound in the grammar: xgrammar 0.2's maxLength lets raw control characters
    # into them (invalid JSON), and a bounded repeat pattern costs it 20-400 ms a token inside
    # the string (measured on SmolLM2, benchmarks/harness.py).  A string is bounded by the reply's
    # budget instead: near its end the reply is steered to close (``ToolCallMatcher.closing``).
    return out




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
        decoded = list(info.decoded_vocab)  # once: each access of the property converts the whole vocabulary
        self.tags: dict[int, frozenset[int]] = {}
        for tag in (OPEN_TAG, CLOSE_TAG):
            tag_id = vocab.get(tag)
            if tag_id is None or tag_id >= vocab_size:
                continue
            raw = tag.encode()
            self.tags[tag_id] = frozenset(
                i for i, piece in enumerate(decoded) if piece and len(piece) < len(raw) and raw.startswith(piece)
            )
        # Each ordinary token's bytes (the first id where several spell the same), for the
        # fallback split of forced text where the tokenizer's own encoding cannot be followed.
        skip = set(self.banned) | set(stop_token_ids) | set(self.tags)
        self.pieces: dict[bytes, int] = {}
        self.spelling: list[bytes] = list(decoded[:vocab_size])
        for i, piece in enumerate(decoded[:vocab_size]):
            if piece and i not in skip:
                self.pieces.setdefault(piece, i)
        self.encode = _encoder(tokenizer)
        # The ordinary tokens sorted by their bytes: the tokens starting with some bytes are one
        # run of it (``longer``), found by bisection when a forced piece needs them (building
        # these tables for the whole vocabulary up front took seconds for 49k tokens).
        ordered = sorted((piece, i) for i, piece in enumerate(self.spelling) if piece and i not in skip)
        self._keys = [piece for piece, _ in ordered]
        self._ids = [i for _, i in ordered]
        self._longer: dict[bytes, Any] = {}
        self._partners: dict[int, Any] = {}

    def longer(self, piece: bytes):
        """The ids of the tokens longer than ``piece`` that start with it (a numpy array)."""
        found = self._longer.get(piece)
        if found is None:
            import bisect

            import numpy as np

            lo = bisect.bisect_right(self._keys, piece)  # past ``piece`` itself
            hi = lo
            while hi < len(self._keys) and self._keys[hi].startswith(piece):
                hi += 1
            found = self._longer[piece] = np.asarray(self._ids[lo:hi], dtype=np.int64)
        return found

    def partners(self, token: int):
        """The ids of the tokens ``b`` that merge with ``token`` into one token (its bytes
        followed by b's spell a token): where the bare token is chosen, none of them can follow
        it in the tokenizer's own encoding (a numpy array)."""
        found = self._partners.get(token)
        if found is None:
            import numpy as np

            piece = self.spelling[token]
            rests = (self.pieces.get(self.spelling[t][len(piece):]) for t in self.longer(piece))
            found = self._partners[token] = np.asarray(sorted({b for b in rests if b is not None}), dtype=np.int64)
        return found

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
        return ToolCallMatcher(self.compile(tools), self, names)


def _encoder(tokenizer: Any) -> Any:
    """``text -> token ids`` with the tokenizer's own encoding (no special tokens added), or None
    for a tokenizer that cannot encode (then forced text falls back to the longest pieces)."""
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        return None

    def run(text: str) -> list[int]:
        return list(encode(text, add_special_tokens=False))

    try:
        run("{")
    except Exception:  # noqa: BLE001 - a tokenizer object without a usable encode
        return None
    return run


class ToolCallMatcher:
    """One generation's walk through the grammar.

    Call ``allowed()`` before each sampling step (a numpy bool mask over the vocabulary, or
    ``None`` once the call and its end-of-turn token are complete) and ``accept(token)`` after.
    ``closing = True`` (set by the decode loop near the end of its token budget) steers the
    reply to its end: where the grammar lets a string, an array or an object close, only the
    closing tokens stay allowed.
    """

    # A forced token whose next step allows more tokens than this is taken as standing alone
    # (free text follows: a string's content); below it, each next token is checked with the
    # tokenizer, so the bare token is offered only where it really is the tokenizer's choice.
    _EXACT_CHECK = 64

    def __init__(self, compiled: Any, vocab: ToolCallGrammar, names: Sequence[str] = ()) -> None:
        import numpy as np

        xgr = _import_xgrammar()
        self._np = np
        self._xgr = xgr
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab.vocab_size)
        self._vocab_size = vocab.vocab_size
        self._vocab = vocab
        self._tags = vocab.tags
        self._banned = np.asarray(list(vocab.banned), dtype=np.int64)
        self._pieces = vocab.pieces
        self._longest = max(map(len, self._pieces), default=0)
        self._spelling = vocab.spelling
        self._names = [n.encode() for n in names]
        self._ids: list[int] = []  # the tokens accepted so far
        self._bytes = bytearray()  # their bytes
        self._named = False  # the tool's name is complete (its closing quote is out)
        # After a bare forced token was offered: the tokens that may follow it (None: any but
        # its merge partners), keyed by that token.
        self._after: tuple[int, Any] | None = None
        self.closing = False

    @property
    def done(self) -> bool:
        return self._matcher.is_terminated()

    def _grammar_mask(self, matcher: Any = None):
        np = self._np
        (matcher or self._matcher).fill_next_token_bitmask(self._bitmask)
        bits = np.unpackbits(self._bitmask.numpy().view(np.uint8), bitorder="little")[: self._vocab_size]
        mask = bits.astype(bool)
        mask[self._banned] = False
        return mask

    def allowed(self):
        if self.done:
            return None
        np = self._np
        mask = self._grammar_mask()
        for tag, prefixes in self._tags.items():
            # Only where the grammar wants the tag itself: everything allowed spells a piece of it.
            if mask[tag] and mask.sum() <= len(prefixes) + 1 and prefixes.issuperset(
                int(i) for i in np.flatnonzero(mask) if i != tag
            ):
                mask[:] = False
                mask[tag] = True
                return mask
        self._follow_bare(mask)
        forced = self._matcher.find_jump_forward_string().encode() if self._pieces else b""
        choice = self._forced(forced, mask) if forced else self._name_choice(mask)
        if choice:
            mask[:] = False
            mask[sorted(choice)] = True
        else:
            self._keep_own_spellings(mask)
            if self.closing:
                self._close(mask)
        return mask

    def _keep_own_spellings(self, mask) -> None:
        """Among a few free choices (after a number: more digits, ``}`` or ``}}``), leave out a
        token the tokenizer would not write there, given the text the grammar forces after it
        (``}`` then a forced ``}`` is ``}}`` to the tokenizer)."""
        np = self._np
        allowed = np.flatnonzero(mask)
        if not 1 < len(allowed) <= self._EXACT_CHECK or self._vocab.encode is None:
            return
        text = self._text()
        if text is None:
            return
        n = len(self._ids)
        dropped = []
        for t in allowed:
            t = int(t)
            probe = self._matcher.fork()
            if not self._spelling[t] or not probe.accept_token(t):
                continue
            forced = probe.find_jump_forward_string()
            if not forced:  # what follows is the model's choice again: nothing to check against
                continue
            try:
                more = self._spelling[t].decode("utf-8") + forced
            except UnicodeDecodeError:
                continue
            ids = self._vocab.encode(text + more)
            if ids[:n] == self._ids and len(ids) > n and ids[n] != t:
                dropped.append(t)
        if dropped and len(dropped) < len(allowed):
            mask[dropped] = False

    # -- the tokenizer's own encoding ----------------------------------------------------------

    def _text(self) -> str | None:
        try:
            return self._bytes.decode("utf-8")
        except UnicodeDecodeError:  # inside a character: no encoding to follow at this step
            return None

    def _continuations(self, more: str) -> list[int] | None:
        """The tokenizer's encoding of the reply so far plus ``more``, past the tokens already
        accepted; None where it does not begin with them (the reply has left its encoding)."""
        text = self._text()
        if text is None or self._vocab.encode is None:
            return None
        ids = self._vocab.encode(text + more)
        n = len(self._ids)
        return ids[n:] if ids[:n] == self._ids and len(ids) > n else None

    def _forced(self, forced: bytes, mask) -> set[int] | None:
        """The tokens that may spell the start of the forced text ``forced`` (see the module
        docstring); None where the encoding cannot be followed (the longest piece is forced)."""
        try:
            rest = self._continuations(forced.decode("utf-8"))
        except UnicodeDecodeError:
            rest = None
        if rest is None:
            token = self._longest_piece(forced, mask)
            return None if token is None else {token}
        first = rest[0]
        if len(rest) >= 2 or not 0 <= first < self._vocab_size:
            return {first} if 0 <= first < self._vocab_size and mask[first] else None
        # One token covers the rest of the forced text: the model's next choice may merge into it.
        longer = self._vocab.longer(self._spelling[first])
        choice = {int(t) for t in longer[mask[longer]]} if len(longer) else set()
        if mask[first] and self._bare_stands(first, forced.decode("utf-8")):
            choice.add(first)
        return choice or None

    def _bare_stands(self, token: int, forced: str) -> bool:
        """Whether ``token`` alone can be the tokenizer's choice: some token the grammar allows
        after it stays apart from it in the tokenizer's encoding.  Records what may follow it."""
        np = self._np
        probe = self._matcher.fork()
        if not probe.accept_token(int(token)):
            return False
        if probe.is_terminated():
            self._after = (token, None)
            return True
        after = np.flatnonzero(self._grammar_mask(probe))
        partners = self._vocab.partners(token)
        if len(partners):
            after = np.setdiff1d(after, partners, assume_unique=False)
        if len(after) > self._EXACT_CHECK:
            self._after = (token, None)
            return True
        text = self._text()
        if text is None or self._vocab.encode is None:
            return False
        n = len(self._ids)
        ok = []
        for t in after:
            t = int(t)
            try:
                piece = self._spelling[t].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if not piece:  # a special token (end of turn): it never merges
                ok.append(t)
                continue
            if self._vocab.encode(text + forced + piece)[n:n + 2] == [token, t]:
                ok.append(t)
        if ok:
            self._after = (token, np.asarray(ok, dtype=np.int64))
        return bool(ok)

    def _follow_bare(self, mask) -> None:
        """After a bare forced token, leave out what would have merged with it."""
        after, self._after = self._after, None
        if after is None or not self._ids or self._ids[-1] != after[0]:
            return
        token, ok = after
        if ok is None:
            partners = self._vocab.partners(token)
            if len(partners) and mask.sum() > len(partners):
                kept = mask.copy()
                kept[partners] = False
                if kept.any():
                    mask[:] = kept
            return
        kept = self._np.zeros_like(mask)
        kept[ok] = mask[ok]
        if kept.any():
            mask[:] = kept

    def _name_choice(self, mask) -> set[int] | None:
        """Choosing the tool is one choice, not a spelling: each tool still possible gets one
        token, the first of the tokenizer's encoding of the rest of its name.  (Where one name
        ends and another goes on, the closing quote is a choice too, and the grammar's mask is
        kept.)"""
        start = self._bytes.find(NAME_KEY) if self._names and not self._named else -1
        if start < 0:
            return None
        spelled = bytes(self._bytes[start + len(NAME_KEY):])
        rests = [n[len(spelled):] for n in self._names if n.startswith(spelled)]
        if not rests or not all(rests):
            return None
        firsts = set()
        for rest in rests:
            ids = self._continuations(rest.decode("utf-8") + '"')
            token = ids[0] if ids else self._longest_piece(rest, mask)
            if token is not None and 0 <= token < self._vocab_size and mask[token]:
                firsts.add(token)
        return firsts or None

    def _close(self, mask) -> None:
        """Near the end of the budget: inside a string, only the tokens that end it (a quote
        first); outside one, only those that close a list or an object where the grammar allows
        one.  The JSON then closes within a few tokens."""
        np = self._np
        in_string, escaped = self._string_state()
        if escaped:
            return  # the next character is escaped: any allowed token, then the quote
        first = (b'"',) if in_string else (b"]", b"}")
        allowed = np.flatnonzero(mask)
        closers = [int(t) for t in allowed if self._spelling[t][:1] in first or not self._spelling[t]]
        if closers:
            mask[:] = False
            mask[closers] = True

    def _string_state(self) -> tuple[bool, bool]:
        """Whether the reply so far ends inside a JSON string, and after a backslash there."""
        start = self._bytes.find(b"{")
        in_string = escaped = False
        for byte in self._bytes[start + 1 if start >= 0 else len(self._bytes):]:
            if escaped:
                escaped = False
            elif in_string and byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = not in_string
        return in_string, escaped

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
        if ok:
            self._ids.append(int(token_id))
            if 0 <= token_id < len(self._spelling):
                self._bytes += self._spelling[token_id]
            if not self._named:
                start = self._bytes.find(NAME_KEY)
                self._named = start >= 0 and b'"' in self._bytes[start + len(NAME_KEY):]
        return ok
