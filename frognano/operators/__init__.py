"""One catalogue of AST bug/fix operators, shared by repair (search) and synthesis (injection).

Each operator enumerates *sites* in one function: ``(old_node, new_node, description)`` triples
on the libcst tree.  A site becomes a :class:`Mutation`, a minimal text span replacement of the
original source, so formatting outside the edit is untouched and every mutation has an exact
inverse (swap ``old`` and ``new``).  Repair applies mutations at suspicious lines to look for a
fix; synthesis applies them to inject a bug and records the inverse as the reference fix.

Cost model: :func:`mutations` parses once and resolves positions once.  A site that swaps one
expression for another (most of them) renders just the two expressions and splices; any other
site re-renders only its smallest enclosing statement (never the module) and strips the common
prefix/suffix of the old and new statement text.  Every result is syntax-checked with ``ast`` on
the enclosing statement's lines.  ``lines=`` / ``functions=`` / ``operators=`` filters run before
any text is generated (``lines=`` skips whole functions), so repair pays only for what it asks.

Scope: top-level functions and methods of top-level classes; nested functions and lambdas are
covered by their enclosing function's walk.  Decorators, parameter lists and annotations are not
mutated (parameter defaults are, by ``default_arg`` only).

Layout: this module holds the public API and the catalogue; ``mutation`` the Mutation record,
``nodes`` the node helpers every operator shares, ``parsed`` the parsed source, ``context`` what
operators read (FunctionContext, the Operator protocol, ``Op``, their base class), ``splice``
mutation construction on the parse (``Prepared``), ``expressions`` and ``statements`` the
operators themselves; ``ingredients`` (literals, callees, exception classes drawn from the file
and tables of confusables, with ``scope`` the module-wide facts they read, cached per parse) and
``adjust`` (`± 1` on integer-valued expressions, wrappers) more of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Iterable

from .adjust import AddOne, Clamp, DropOne, Unclamp, Wrap
from .context import FunctionContext, FunctionInfo, Op, Operator, Site
from .expressions import (
    AddNot,
    Arith,
    BoolOp,
    Bound,
    Compare,
    Constant,
    DefaultArg,
    DropOperand,
    OffByOne,
    RemoveCall,
    RemoveNot,
    ReturnValue,
    SwapArgs,
    WrongName,
)
from .guards import AddGuard, LoopCondition
from .handlers import ExtendExcept, NarrowExcept, UnwrapTry, WrapTry
from .parameters import DropFString, FixAttribute, InlineParameter, MakeFString, UseParameter
from .ingredients import SwapCallee, SwapException, SwapLiteral
from .insertions import InsertIf, InsertStatement, RemoveIf
from .mutation import INVERSES, Mutation, OperatorError
from .returns import DropReturn, InsertReturn
from .slices import SliceEnd
from .splice import Prepared
from .statements import (
    InvertIfElse,
    RemoveCondition,
    RemoveReturn,
    RemoveStatement,
    SwapStatements,
)

__all__ = [
    "CATALOGUE",
    "FunctionContext",
    "FunctionInfo",
    "Mutation",
    "Op",
    "Operator",
    "OperatorError",
    "Prepared",
    "Site",
    "functions",
    "mutations",
    "prepare",
]


class _InverseOnly(Op):
    """Undoes a removal by re-inserting text; has no sites of its own."""

    enumerable = False

    def __init__(self, name: str, family: str, inverse: str, description: str) -> None:
        self.name, self.family, self.inverse, self.description = name, family, inverse, description


def _catalogue() -> dict[str, Operator]:
    ops: list[Operator] = [
        Compare(), Arith(), BoolOp(), AddNot(), RemoveNot(), OffByOne(), Bound(), SwapArgs(),
        WrongName(), DropOperand(), RemoveCondition(), InvertIfElse(), RemoveStatement(),
        RemoveReturn(), RemoveCall(), ReturnValue(), DefaultArg(), Constant(), SwapStatements(),
        # Batch A (issue 14): replacements drawn from the file, ± 1 and wrappers on values.
        SwapLiteral(), SwapCallee(), SwapException(), AddOne(), DropOne(), Wrap(), Clamp(), Unclamp(),
        # Batch B (issue 14): insertions (statements, returns, guards), loop conditions, slices;
        # add_operand and insert_statement were inverse-only before.
        InsertStatement(), InsertIf(), RemoveIf(), InsertReturn(), DropReturn(), AddGuard(),
        LoopCondition(), SliceEnd(),
        # Issue 28, from the history corpus's reference patches: exception handling.
        ExtendExcept(), NarrowExcept(), WrapTry(), UnwrapTry(),
        # ... an unread parameter put to use, an attribute the tests found missing.
        UseParameter(), InlineParameter(), FixAttribute(), MakeFString(), DropFString(),
        _InverseOnly("restore_condition", "control", "remove_condition", "put back a removed if"),
        _InverseOnly("wrap_call", "statement", "remove_call", "put back a removed call"),
        _InverseOnly("misspell_attribute", "name", "fix_attribute", "put back a misspelt attribute"),
    ]
    return {op.name: op for op in ops}


CATALOGUE: dict[str, Operator] = _catalogue()
INVERSES.update({name: op.inverse for name, op in CATALOGUE.items()})  # for Mutation.inverse


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def functions(source: str) -> list[FunctionInfo]:
    """Top-level functions and methods of top-level classes, in source order."""
    prepared = Prepared(source)
    return [FunctionInfo(qualname, prepared.start_line(fn), prepared.positions[fn].end.line)
            for qualname, fn, _ in prepared.function_defs()]


def iter_sites(prepared: Prepared, *, lines: Collection[int] | None = None,
               functions: Collection[str] | None = None, operators: Iterable[str] | None = None,
               ingredients: Collection[str] = (),
               raised: Collection[str] = ()) -> list[tuple[Operator, FunctionContext, Site]]:
    """Filtered sites in mutation order (source position, then catalogue order)."""
    if operators is None:
        names = [n for n, op in CATALOGUE.items() if op.enumerable]
    else:
        wanted = set(operators)
        unknown = wanted - CATALOGUE.keys()
        if unknown:
            raise OperatorError(f"unknown operator(s): {', '.join(sorted(unknown))}")
        names = [n for n in CATALOGUE if n in wanted and CATALOGUE[n].enumerable]
    order = {n: i for i, n in enumerate(CATALOGUE)}
    line_set = set(lines) if lines is not None else None
    func_set = set(functions) if functions is not None else None
    found = []
    for qualname, fn, class_info in prepared.function_defs():
        if func_set is not None and qualname not in func_set:
            continue
        if line_set is not None and not any(
                prepared.start_line(fn) <= ln <= prepared.positions[fn].end.line for ln in line_set):
            continue  # every site lies inside its function: skip the walk entirely
        ctx = FunctionContext(prepared, fn, qualname, class_info)
        ctx.ingredients = tuple(ingredients)
        ctx.raised = tuple(raised)
        for name in names:
            op = CATALOGUE[name]
            for seq, site in enumerate(op.sites(ctx)):
                start = prepared.positions[site.first or site.old].start
                if line_set is None or start.line in line_set:
                    found.append(((start.line, start.column, order[name], seq), op, ctx, site))
    found.sort(key=lambda item: item[0])
    return [(op, ctx, site) for _, op, ctx, site in found]


def prepare(source: str) -> Prepared:
    """Parse `source` once for several `mutations(..., prepared=...)` calls on it (the parse
    and position metadata are most of the cost of listing one function's mutations)."""
    return Prepared(source)


def mutations(source: str, path: str = "", *, lines: Collection[int] | None = None,
              functions: Collection[str] | None = None,
              operators: Iterable[str] | None = None,
              prepared: Prepared | None = None, ingredients: Collection[str] = (),
              raised: Collection[str] = (), per_line: bool = False) -> list[Mutation]:
    """Every mutation the catalogue offers in `source`, filtered, deduplicated, in source order.

    `lines` keeps mutations whose node starts on one of those lines; `functions` keeps those
    qualified names ("Rect.area"); `operators` restricts catalogue names; `prepared` is
    `prepare(source)` reused; `ingredients` are strings from outside the file (the failing
    tests' messages) that `swap_literal` may also put in place of a string literal; `raised`
    the exception classes those tests raised (`extend_except`, `wrap_try` catch them).
    `per_line` keeps an edit once per line that offers it, not once (an insertion between two
    lines is offered by both): the search lists several suspicious lines in one call and gives
    each line's edits that line's rank.  Raises OperatorError when the source does not parse or
    an operator name is unknown.
    """
    if prepared is None:
        prepared = Prepared(source)
    elif prepared.source != source:
        raise OperatorError("`prepared` was made from another source")
    out: list[Mutation] = []
    seen: set[tuple[int, int, str, str]] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. invalid escape sequences, seen by ast.parse
        for op, ctx, site in iter_sites(prepared, lines=lines, functions=functions, operators=operators,
                                        ingredients=ingredients, raised=raised):
            m = prepared.build(op, ctx, site, path)
            key = (m.line if per_line else 0, m.start, m.old, m.new) if m is not None else None
            if key is not None and key not in seen:
                seen.add(key)
                out.append(m)
    return out
