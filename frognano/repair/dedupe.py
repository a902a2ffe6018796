"""Semantic keys of candidate edits: two edits whose code means the same are validated once.

Operators reach the same program by different texts (``x + 1`` and ``x+1``, ``a < b`` and
``b > a``); a test run costs far more than a parse, so each candidate is keyed by the
``ast.dump`` (no positions) of the smallest unit it changes, normalised, and a key already
seen is skipped before validation.

The unit is the enclosing top-level function or method (parsed on its own, so the cost does not
grow with the module), else the whole module.  Its lines before and after are unchanged text, so
``(path, first line, lines after it, dump)`` identifies the whole file up to meaning.

The same parse tells whether the candidate compiles at all: the unit's tree is compiled (the
checks the parser leaves to the compiler: ``return`` outside a function, ``break`` outside a
loop, a ``nonlocal`` without a binding), so a 5,000-line module is not compiled whole for each
of hundreds of candidates (16 ms each on more-itertools' ``more.py``: 3 s of a 4.7 s candidate
generation).  Only the unit's text changed, so the rest of the module compiles as it did.
"""

from __future__ import annotations

import ast

from .localize import StatementMap
from .spans import changed_span

# `b > a` is `a < b`: comparisons are keyed in their `<` / `<=` form.
_MIRROR: dict[type, type] = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}

Key = tuple[str, int, int, str]


class _Normalise(ast.NodeTransformer):
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1 and type(node.ops[0]) in _MIRROR:
            return ast.Compare(left=node.comparators[0], ops=[_MIRROR[type(node.ops[0])]()],
                               comparators=[node.left])
        return node


def _dump(text: str, path: str) -> str | None:
    """The normalised dump of ``text`` (an indented method parses under an ``if 1:``), None when
    it does not compile."""
    indented = text[:1].isspace()
    try:
        tree = ast.parse(("if 1:\n" + text) if indented else text)
        compile(tree, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return ast.dump(_Normalise().visit(tree))


def _statement_at(smap: StatementMap, line: int):
    """The statement on ``line``, or on the nearest line above it that holds one: an inserted
    statement (a guard, a copied line) often lands on a blank line between two statements, and
    keyed by the whole module instead of its function it cost 50 times as much (19 of 208
    candidates of a more-itertools fix: 4 of its 10 s of candidate generation)."""
    for at in range(line, 0, -1):
        stmt = smap.statement(at)
        if stmt is not None:
            return stmt
    return None


class SemanticKeys:
    """Keys of edited files, with the statement maps of their original texts cached."""

    def __init__(self) -> None:
        self._maps: dict[str, StatementMap | None] = {}

    def _spans(self, path: str, before: str) -> StatementMap | None:
        if path not in self._maps:
            try:
                self._maps[path] = StatementMap(before)
            except (SyntaxError, ValueError):
                self._maps[path] = None
        return self._maps[path]

    def key(self, path: str, before: str, after: str) -> Key:
        """``after``'s key; SyntaxError when it does not compile (no key: not a candidate)."""
        old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
        head, end, delta = changed_span(old, new)
        smap = self._spans(path, before)
        stmt = _statement_at(smap, head + 1) if smap is not None else None
        span = smap.function_span(stmt.function) if smap is not None and stmt and stmt.function else range(0)
        # The whole changed span must lie in the function (an insertion right after it does not).
        if span and span.start <= head + 1 and max(end, head + 1) <= span.stop - 1:
            first, last = span.start, span.stop - 1  # 1-based, inclusive, in `before`
            dump = _dump("".join(new[first - 1:last + delta]), path)
            if dump is not None:
                return (path, first, len(old) - last, dump)
        # Not inside one function, or its unit does not compile on its own: the whole module.
        dump = _dump(after, path)
        if dump is None:
            compile(after, path, "exec", dont_inherit=True)  # raises what is wrong with it
            return (path, 0, 0, after)  # compiles, yet no tree to dump: keyed by its text
        return (path, 0, 0, dump)
