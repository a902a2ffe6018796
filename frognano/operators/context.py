"""What operators read: the per-function context, the Operator protocol and ``Op``, the base
class of every operator.  The node helpers they share are in ``nodes``; the parse the context is
made from is ``parsed.Parsed`` (``splice.Prepared`` at run time, which also builds mutations)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple, Protocol

import libcst as cst
from libcst.metadata import ExpressionContext

from .nodes import ClassInfo, decorated, is_word, min_prec, parenthesize, prec, walk
from .parsed import Parsed


@dataclass(frozen=True)
class FunctionInfo:
    qualname: str  # "helper" or "Rect.area"
    line: int  # first decorator or `def` line
    end_line: int  # last line of the body


# --------------------------------------------------------------------------------------------
# Operator protocol and the per-function context operators read
# --------------------------------------------------------------------------------------------

class Site(NamedTuple):
    """One way an operator can change a function: replace `old` (a node of the tree) by `new`."""

    old: cst.CSTNode
    new: cst.CSTNode
    description: str
    # When `old` is a whole block (statement removal, swaps), these name the statements the
    # mutation is about, so Mutation.line points at them rather than at the block.
    first: cst.CSTNode | None = None
    last: cst.CSTNode | None = None


class Operator(Protocol):
    name: str  # catalogue key
    family: str  # coarse kind for synthesis: operator, constant, bound, name, control, statement
    inverse: str  # catalogue key of the operator that undoes it (may be itself)
    enumerable: bool  # False for inverse-only operators, whose sites() yields nothing
    description: str  # one line for help and docs

    def sites(self, func: FunctionContext) -> Iterator[Site]: ...


class FunctionContext:
    """What operators need to know about one top-level function or method.

    ``nodes`` holds the body's nodes in source order (annotations and decorators left out, so
    operators never mutate typing or decoration); ``parents`` covers the whole function and the
    chain up to the module, which the region logic and precedence checks need.
    """

    def __init__(self, prepared: Parsed, node: cst.FunctionDef, qualname: str,
                 class_info: ClassInfo | None) -> None:
        self.prepared = prepared
        self.module = prepared.module
        self.ingredients: tuple[str, ...] = ()  # strings from the failing tests' output (mutations())
        self.raised: tuple[str, ...] = ()  # exception classes the failing tests raised (mutations())
        self.node = node
        self.qualname = qualname
        self.class_info = class_info
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.nodes: list[cst.CSTNode] = []
        if class_info is None:
            self.parents[node] = prepared.module
        else:
            self.parents[node] = class_info.node.body
            self.parents[class_info.node.body] = class_info.node
            self.parents[class_info.node] = prepared.module
        self._walk()

    def _walk(self) -> None:
        # Iterative pre-order walk of the whole function (parents are needed everywhere), but
        # only the body's nodes are offered to operators, minus annotations and decorators;
        # this function's own parameter defaults are read by default_arg directly.
        fn = self.node
        stack: list[tuple[cst.CSTNode, bool]] = [(fn, False)]
        while stack:
            node, keep = stack.pop()
            if keep and isinstance(node, (cst.Annotation, cst.Decorator)):
                keep = False
            if keep:
                self.nodes.append(node)
            for child in reversed(node.children):
                self.parents[child] = node
                stack.append((child, child is fn.body if node is fn else keep))

    # -- small helpers shared by operators -------------------------------------------------
    def of_type(self, *types: type) -> Iterator:
        return (n for n in self.nodes if isinstance(n, types))

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def code(self, node: cst.CSTNode, limit: int = 48) -> str:
        """One-line snippet for descriptions (whitespace collapsed, long text cut)."""
        if isinstance(node, cst.SimpleStatementLine):
            text = "; ".join(self.module.code_for_node(s).strip().rstrip(";") for s in node.body)
        else:
            text = self.module.code_for_node(node)
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 3] + "..."

    @property
    def self_name(self) -> str | None:
        """Name of the instance/class parameter of a method (None for functions, staticmethods)."""
        if self.class_info is None or decorated(self.node, "staticmethod"):
            return None
        params = [*self.node.params.posonly_params, *self.node.params.params]
        return params[0].name.value if params else None

    @cached_property
    def locals(self) -> dict[str, int]:
        """Local names -> line of first binding (parameters: 0), excluding self/cls.

        Comprehension variables, nested def/class names and nested parameters are left out:
        substituting them elsewhere gives NameErrors, not plausible bugs.
        """
        skip = {"self", "cls", self.self_name}
        names: dict[str, int] = {}
        p = self.node.params
        star = [p.star_arg] if isinstance(p.star_arg, cst.Param) else []
        for param in (*p.posonly_params, *p.params, *star, *p.kwonly_params,
                      *([p.star_kwarg] if p.star_kwarg else [])):
            if param.name.value not in skip:
                names.setdefault(param.name.value, 0)
        contexts = self.prepared.contexts_of(self.node)
        comp = self._comprehension_targets
        for node in self.of_type(cst.Name):
            if contexts.get(node) is not ExpressionContext.STORE or id(node) in comp:
                continue
            if isinstance(self.parents.get(node), (cst.Param, cst.FunctionDef, cst.ClassDef)):
                continue
            if node.value not in skip:
                names.setdefault(node.value, self.prepared.positions[node].start.line)
        return names

    @cached_property
    def _comprehension_targets(self) -> set[int]:
        return {id(n) for comp in self.of_type(cst.CompFor) for n in walk(comp.target)
                if isinstance(n, cst.Name)}

    def is_load(self, node: cst.BaseExpression) -> bool:
        if self.prepared.contexts_of(self.node).get(node) is not ExpressionContext.LOAD:
            return False
        parent = self.parents.get(node)
        # ExpressionContextProvider calls keyword names in f(a=1) loads; they are not.
        return not (isinstance(parent, cst.Arg) and parent.keyword is node)

    def fit(self, old: cst.BaseExpression, new: cst.BaseExpression, *,
            adopt_parens: bool = True) -> cst.BaseExpression:
        """Make `new` safe to stand where `old` stood.

        Keeps old's own parentheses (``(a and b)`` -> ``(a)``), parenthesises when precedence
        requires it (``abs(a - b) * 2`` -> ``(a - b) * 2``), and when `new` would glue onto a
        neighbouring keyword (``if(x)`` -> ``if(not (x))``, not ``ifnot (x)``).
        """
        if adopt_parens and old.lpar:
            return new.with_changes(lpar=(*old.lpar, *new.lpar), rpar=(*new.rpar, *old.rpar))
        if new.lpar:
            return new
        parent = self.parents.get(old)
        if prec(new) <= min_prec(parent, old):
            return parenthesize(new)
        if isinstance(parent, cst.Attribute) and isinstance(new, (cst.Integer, cst.Float, cst.Imaginary)):
            return parenthesize(new)  # `1.real` is a float literal's syntax error
        before, after = self.prepared.neighbours(old)
        if is_word(before) or is_word(after):
            text = self.module.code_for_node(new)
            if (is_word(before) and is_word(text[:1])) or (is_word(after) and is_word(text[-1:])):
                return parenthesize(new)
        return new


class Op:
    """The base class of every operator: the ``Operator`` fields, no sites until ``sites`` is given."""

    name = ""
    family = ""
    inverse = ""
    enumerable = True
    description = ""

    def sites(self, func: FunctionContext) -> Iterator[Site]:
        return iter(())

    def __repr__(self) -> str:
        return f"<operator {self.name}>"
