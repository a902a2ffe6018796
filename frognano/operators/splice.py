"""Splicing: the construction of a Mutation from a site, by splicing expressions or
re-rendering the smallest enclosing statement, on a parse (``Prepared``, a ``parsed.Parsed``
with the caches this needs)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import fields

import libcst as cst

from .context import FunctionContext, Operator, Site
from .mutation import Mutation
from .parsed import Parsed


class Prepared(Parsed):
    """One parse of a source file with everything mutation construction needs."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._regions: dict[cst.CSTNode, tuple[int, str, str, bool] | None] = {}
        self._lines: dict[cst.CSTNode, tuple[int, int, str, bool]] = {}
        self._newline_len = len(self.module.code_for_node(cst.TrailingWhitespace()))

    # -- regions: the smallest statement whose text we regenerate ----------------------------
    def _is_region(self, ctx: FunctionContext, node: cst.CSTNode) -> bool:
        return (isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
                and isinstance(ctx.parents.get(node), (cst.IndentedBlock, cst.Module)))

    def _region(self, node: cst.CSTNode) -> tuple[int, str, str, bool] | None:
        """(offset, indentation, text, parses) of a region statement rendered by libcst, or
        None if that text is not found where the statement starts (the caller then climbs)."""
        if node in self._regions:
            return self._regions[node]
        found = None
        column = self.positions[node].start.column
        decorators = getattr(node, "decorators", ())
        if decorators:
            column = self.positions[decorators[0]].start.column
        start = self.line_starts[self.start_line(node) - 1]
        indent = self.vsource[start : start + column]
        if not indent.strip():
            text = self._render(node, indent)
            if self.vsource.startswith(text, start):
                found = (start, indent, text, _parses(text, indent))
        self._regions[node] = found
        return found

    def _render(self, node: cst.CSTNode, indent: str) -> str:
        """A statement's text from its first token line on (leading comment lines left out)."""
        if hasattr(node, "leading_lines"):
            node = node.with_changes(leading_lines=())
        if not indent:
            return self.module.code_for_node(node)
        # A statement renders its own indentation only inside a block: render a one-statement
        # block with the statement's absolute indentation and drop the block's header newline.
        block = cst.IndentedBlock(body=[node], indent=indent)
        return self.module.code_for_node(block)[self._newline_len :]

    def build(self, op: Operator, ctx: FunctionContext, site: Site, path: str = "") -> Mutation | None:
        """The Mutation for one site, or None when it changes nothing or breaks the syntax."""
        old, new = site.old, site.new
        first = site.first or old
        last = site.last or first
        line = self.positions[first].start.line
        end_line = max(line, self.positions[last].end.line)
        made = self._splice_expression(ctx, old, new)
        if made is _NOT_APPLICABLE:
            made = self._render_region(ctx, old, new)
        if made is None:
            return None
        start, old_span, new_span = made
        if start + len(old_span) > len(self.source) or not self.source.startswith(old_span, start):
            return None  # only the phantom final newline differs; cannot happen for real edits
        return Mutation(op.name, path, start, old_span, new_span, line, end_line, ctx.qualname,
                        site.description)

    def _splice_expression(self, ctx: FunctionContext, old: cst.CSTNode, new: cst.CSTNode
                           ) -> tuple[int, str, str] | None | object:
        """Fast path for the common case, one expression replaced by another.

        When `old` renders standalone exactly as it reads in the file (no continuation lines
        indented by context), so does its replacement, so rendering the two expressions is
        enough; the syntax check parses the source lines of the enclosing statement with the
        new text spliced in.  Returns the span, None for a rejected site (no change, broken
        syntax), or _NOT_APPLICABLE.
        """
        if not (isinstance(old, cst.BaseExpression) and isinstance(new, cst.BaseExpression)):
            return _NOT_APPLICABLE
        start, end = self.expression_bounds(old)
        code = self.module.code_for_node
        old_code = code(old)
        if self.vsource[start:end] != old_code:
            return _NOT_APPLICABLE
        new_code = code(new)
        if new_code == old_code:
            return None
        statement = ctx.parents.get(old)
        while statement is not None and not self._is_region(ctx, statement):
            statement = ctx.parents.get(statement)
        if statement is not None:
            lo, hi, indent, parsed = self._statement_lines(statement)
            if parsed and lo <= start and end <= hi:
                text = self.vsource[lo:start] + new_code + self.vsource[end:hi]
                if not _parses(text, indent):
                    return None
        p, old_span, new_span = _minimal_span(old_code, new_code)
        return start + p, old_span, new_span

    def _statement_lines(self, node: cst.CSTNode) -> tuple[int, int, str, bool]:
        """(start, end, indentation, parses) of the whole source lines a statement spans."""
        found = self._lines.get(node)
        if found is None:
            first, last = self.start_line(node), self.positions[node].end.line
            lo = self.line_starts[first - 1]
            hi = self.line_starts[last] if last < len(self.line_starts) else len(self.vsource)
            text = self.vsource[lo:hi]
            indent = text[: len(text) - len(text.lstrip(" \t\f"))]
            found = self._lines[node] = (lo, hi, indent, _parses(text, indent))
        return found

    def _render_region(self, ctx: FunctionContext, old: cst.CSTNode, new: cst.CSTNode
                       ) -> tuple[int, str, str] | None:
        """General path: re-render the smallest enclosing statement and diff it."""
        node = old
        # The replaced node is its own region only when it is a statement replaced by a
        # statement that keeps its leading comment lines (which regions leave out).
        if not (self._is_region(ctx, old) and isinstance(new, cst.CSTNode)
                and getattr(new, "leading_lines", None) is getattr(old, "leading_lines", None)):
            node = ctx.parents.get(old)
        region = None
        while node is not None:
            if self._is_region(ctx, node):
                region = self._region(node)
                if region is not None:
                    break
            node = ctx.parents.get(node)
        if region is None:  # nothing located exactly: regenerate the module (slow, always right)
            offset, indent, old_text, parsed = 0, "", self.module.code, True
            new_text = self.module.deep_replace(old, new).code
        else:
            offset, indent, old_text, parsed = region
            new_text = self._render(_replace_path(ctx.parents, node, old, new), indent)
        if new_text == old_text or (parsed and not _parses(new_text, indent)):
            return None
        p, old_span, new_span = _minimal_span(old_text, new_text)
        return offset + p, old_span, new_span


_NOT_APPLICABLE = object()


def _replace_path(parents: Mapping, top: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode
                  ) -> cst.CSTNode:
    """`top` with descendant `old` replaced by `new`, copying only the nodes on the path between
    them (deep_replace would rebuild every node under `top`)."""
    node, replacement = old, new
    while node is not top:
        parent = parents[node]
        replacement = _replace_child(parent, node, replacement)
        node = parent
    return replacement


def _replace_child(parent: cst.CSTNode, child: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    for f in fields(parent):
        value = getattr(parent, f.name)
        if value is child:
            return parent.with_changes(**{f.name: new})
        if isinstance(value, (list, tuple)) and any(v is child for v in value):
            return parent.with_changes(**{f.name: [new if v is child else v for v in value]})
    return parent.deep_replace(child, new)  # not a direct field: let libcst find it


def _common_prefix(a: str, b: str) -> int:
    # Binary search on slice equality: C-speed comparisons instead of a Python char loop.
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _minimal_span(a: str, b: str) -> tuple[int, str, str]:
    # Suffix first: a region's final newline then always stays out of the span, which matters
    # for a file without a trailing newline (the region text has one the file lacks).
    s = _common_prefix(a[::-1], b[::-1])
    a_, b_ = a[: len(a) - s], b[: len(b) - s]
    p = _common_prefix(a_, b_)
    return p, a_[p:], b_[p:]


def _parses(text: str, indent: str) -> bool:
    try:
        ast.parse("if 1:\n" + text if indent else text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True
