"""What operators read: the per-function context, the Operator protocol and its base class,
and the small node helpers (precedence, parentheses, decorators) they share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple, Protocol

import libcst as cst
from libcst.metadata import ExpressionContext

if TYPE_CHECKING:
    from .splice import _Prepared


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

    def __init__(self, prepared: _Prepared, node: cst.FunctionDef, qualname: str,
                 class_info: _ClassInfo | None) -> None:
        self.prepared = prepared
        self.module = prepared.module
        self.ingredients: tuple[str, ...] = ()  # strings from the failing tests' output (mutations())
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
        if self.class_info is None or _decorated(self.node, "staticmethod"):
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
        contexts = self.prepared.contexts
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
        return {id(n) for comp in self.of_type(cst.CompFor) for n in _walk(comp.target)
                if isinstance(n, cst.Name)}

    def is_load(self, node: cst.BaseExpression) -> bool:
        if self.prepared.contexts.get(node) is not ExpressionContext.LOAD:
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
        if _prec(new) <= _min_prec(parent, old):
            return _parenthesize(new)
        if isinstance(parent, cst.Attribute) and isinstance(new, (cst.Integer, cst.Float, cst.Imaginary)):
            return _parenthesize(new)  # `1.real` is a float literal's syntax error
        before, after = self.prepared.neighbours(old)
        if _is_word(before) or _is_word(after):
            text = self.module.code_for_node(new)
            if (_is_word(before) and _is_word(text[:1])) or (_is_word(after) and _is_word(text[-1:])):
                return _parenthesize(new)
        return new


def _decorated(fn: cst.FunctionDef, name: str) -> bool:
    for d in fn.decorators:
        dec = d.decorator
        if isinstance(dec, cst.Call):
            dec = dec.func
        if isinstance(dec, cst.Name) and dec.value == name:
            return True
        if isinstance(dec, cst.Attribute) and dec.attr.value == name:
            return True
    return False


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _is_word(ch: str) -> bool:
    return bool(ch) and (ch.isalnum() or ch == "_")


def _parenthesize(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


# Python's expression precedence, low to high. Parenthesised nodes count as atoms.
_ATOM = 16
_BIN_PREC = {
    cst.BitOr: 6, cst.BitXor: 7, cst.BitAnd: 8, cst.LeftShift: 9, cst.RightShift: 9,
    cst.Add: 10, cst.Subtract: 10, cst.Multiply: 11, cst.Divide: 11, cst.FloorDivide: 11,
    cst.Modulo: 11, cst.MatrixMultiply: 11, cst.Power: 13,
}


def _prec(node: cst.CSTNode) -> int:
    if getattr(node, "lpar", None):
        return _ATOM
    if isinstance(node, (cst.NamedExpr, cst.Yield, cst.GeneratorExp, cst.StarredElement)):
        return -1  # need parentheses nearly everywhere
    if isinstance(node, cst.Lambda):
        return 0
    if isinstance(node, cst.IfExp):
        return 1
    if isinstance(node, cst.BooleanOperation):
        return 2 if isinstance(node.operator, cst.Or) else 3
    if isinstance(node, cst.UnaryOperation):
        return 4 if isinstance(node.operator, cst.Not) else 12
    if isinstance(node, cst.Comparison):
        return 5
    if isinstance(node, cst.BinaryOperation):
        return _BIN_PREC.get(type(node.operator), 11)
    if isinstance(node, cst.Await):
        return 14
    return _ATOM


def _min_prec(parent: cst.CSTNode | None, child: cst.CSTNode) -> int:
    """A child of `parent` needs precedence above this (conservative: ties get parentheses)."""
    if isinstance(parent, cst.BinaryOperation):
        return _BIN_PREC.get(type(parent.operator), 11)
    if isinstance(parent, cst.UnaryOperation):
        return 4 if isinstance(parent.operator, cst.Not) else 11
    if isinstance(parent, cst.BooleanOperation):
        return 2 if isinstance(parent.operator, cst.Or) else 3
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
        return 5
    if isinstance(parent, cst.IfExp):
        return 1
    if isinstance(parent, cst.Await):
        return 13
    if isinstance(parent, (cst.Attribute, cst.Subscript, cst.Call)):
        return _ATOM - 1  # value of x.a / x[i] / x(...): only atoms
    return -1


class _ClassInfo:
    def __init__(self, node: cst.ClassDef) -> None:
        self.node = node
        self.methods = [s for s in _block_body(node.body) if isinstance(s, cst.FunctionDef)]

    @cached_property
    def data_attrs(self) -> tuple[str, ...]:
        """Attributes of instances: `self.x` used or assigned in any method, class-level names,
        properties; minus methods (``self.width`` -> ``self.area`` is not a plausible bug)."""
        found: dict[str, None] = {}
        called: set[str] = set()
        for stmt in _block_body(self.node.body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    target = getattr(small, "target", None)
                    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [target]
                    for t in targets:
                        if isinstance(t, cst.Name):
                            found.setdefault(t.value)
        methods = set()
        for fn in self.methods:
            if _decorated(fn, "property") or _decorated(fn, "cached_property"):
                found.setdefault(fn.name.value)
            else:
                methods.add(fn.name.value)
            params = [*fn.params.posonly_params, *fn.params.params]
            if not params or _decorated(fn, "staticmethod"):
                continue
            me = params[0].name.value
            for n in _walk(fn.body):
                if isinstance(n, cst.Call) and _self_attr(n.func, me):
                    called.add(n.func.attr.value)
                elif _self_attr(n, me):
                    found.setdefault(n.attr.value)
        return tuple(a for a in found if a not in called and a not in methods)


def _self_attr(node: cst.CSTNode, me: str | None) -> bool:
    return (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
            and node.value.value == me)


def _block_body(body: cst.BaseSuite) -> Iterable[cst.CSTNode]:
    return body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ()


class _Op:
    name = ""
    family = ""
    inverse = ""
    enumerable = True
    description = ""

    def sites(self, func: FunctionContext) -> Iterator[Site]:
        return iter(())

    def __repr__(self) -> str:
        return f"<operator {self.name}>"
