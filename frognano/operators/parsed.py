"""One parse of a source file with positions: what the per-function context (``context``) and
the module-wide facts (``scope``) read.  ``splice.Prepared`` extends it with the construction of
mutations; this half is apart so that ``context``, which ``splice`` reads, need not import it."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import libcst as cst
from libcst.metadata import (
    ExpressionContext,
    ExpressionContextProvider,
    MetadataWrapper,
    PositionProvider,
)

from .mutation import OperatorError
from .nodes import ClassInfo

_NEWLINE = re.compile(r"\r\n|\r|\n")


class Parsed:
    """One parse of a source file: the libcst module, node positions and expression contexts,
    and offsets into the text."""

    def __init__(self, source: str) -> None:
        try:
            self.module = cst.parse_module(source)
        except (cst.ParserSyntaxError, ValueError, RecursionError) as exc:
            raise OperatorError(f"source does not parse: {exc}") from None
        self.source = source
        self.wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)  # keep node identity
        self.positions = self.wrapper.resolve(PositionProvider)
        self._contexts: dict[cst.FunctionDef, Mapping[cst.CSTNode, ExpressionContext]] = {}
        # libcst renders a statement with its final newline even when the file lacks one.
        module = self.module
        self.vsource = source if module.has_trailing_newline or not module.body else source + module.default_newline
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(self.vsource)]

    def contexts_of(self, fn: cst.FunctionDef) -> Mapping[cst.CSTNode, ExpressionContext]:
        """Load, store or del, for the expressions of function ``fn``: resolved on the function
        alone (a module of its own around the same nodes), once.  What an expression does
        depends only on the statement it is in; resolving the whole module took 0.4 s on
        more-itertools' 4,800-line ``more.py``, where the search needs a few functions (10 ms
        each)."""
        found = self._contexts.get(fn)
        if found is None:
            alone = MetadataWrapper(cst.Module(body=[fn]), unsafe_skip_copy=True)  # the same nodes
            found = self._contexts[fn] = alone.resolve(ExpressionContextProvider)
        return found

    def function_defs(self) -> Iterator[tuple[str, cst.FunctionDef, ClassInfo | None]]:
        for stmt in self.module.body:
            if isinstance(stmt, cst.FunctionDef):
                yield stmt.name.value, stmt, None
            elif isinstance(stmt, cst.ClassDef):
                info = ClassInfo(stmt)
                for fn in info.methods:
                    yield f"{stmt.name.value}.{fn.name.value}", fn, info

    def start_line(self, node: cst.CSTNode) -> int:
        decorators = getattr(node, "decorators", ())
        return self.positions[decorators[0] if decorators else node].start.line

    def offset(self, pos: cst.metadata.CodePosition) -> int:
        return self.line_starts[pos.line - 1] + pos.column

    def expression_bounds(self, node: cst.BaseExpression) -> tuple[int, int]:
        """Offsets of `node`'s text in the source, its own parentheses included (positions
        leave them out)."""
        rng = self.positions[node]
        code = self.module.code_for_node
        start = self.offset(rng.start) - sum(len(code(p)) for p in node.lpar)
        end = self.offset(rng.end) + sum(len(code(p)) for p in node.rpar)
        return start, end

    def neighbours(self, node: cst.BaseExpression) -> tuple[str, str]:
        """Characters just before and after `node`'s text."""
        start, end = self.expression_bounds(node)
        return self.vsource[start - 1 : start] if start > 0 else "", self.vsource[end : end + 1]
