"""Facts about libcst nodes that every operator module reads: precedence and parentheses,
a plain walk, decorators, ``self.x`` attributes, integer and string literals, call names, and
what a class holds (``ClassInfo``).

The bottom of the package: it imports nothing of it, so the parse (``parsed``), the per-function
context (``context``) and the operators can all use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cached_property

import libcst as cst


def decorated(fn: cst.FunctionDef, name: str) -> bool:
    for d in fn.decorators:
        dec = d.decorator
        if isinstance(dec, cst.Call):
            dec = dec.func
        if isinstance(dec, cst.Name) and dec.value == name:
            return True
        if isinstance(dec, cst.Attribute) and dec.attr.value == name:
            return True
    return False


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def is_word(ch: str) -> bool:
    return bool(ch) and (ch.isalnum() or ch == "_")


def parenthesize(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


# Python's expression precedence, low to high. Parenthesised nodes count as atoms.
ATOM = 16
BIN_PREC = {
    cst.BitOr: 6, cst.BitXor: 7, cst.BitAnd: 8, cst.LeftShift: 9, cst.RightShift: 9,
    cst.Add: 10, cst.Subtract: 10, cst.Multiply: 11, cst.Divide: 11, cst.FloorDivide: 11,
    cst.Modulo: 11, cst.MatrixMultiply: 11, cst.Power: 13,
}


def prec(node: cst.CSTNode) -> int:
    if getattr(node, "lpar", None):
        return ATOM
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
        return BIN_PREC.get(type(node.operator), 11)
    if isinstance(node, cst.Await):
        return 14
    return ATOM


def min_prec(parent: cst.CSTNode | None, child: cst.CSTNode) -> int:
    """A child of `parent` needs precedence above this (conservative: ties get parentheses)."""
    if isinstance(parent, cst.BinaryOperation):
        return BIN_PREC.get(type(parent.operator), 11)
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
        return ATOM - 1  # value of x.a / x[i] / x(...): only atoms
    return -1


class ClassInfo:
    def __init__(self, node: cst.ClassDef) -> None:
        self.node = node
        self.methods = [s for s in block_body(node.body) if isinstance(s, cst.FunctionDef)]

    @cached_property
    def data_attrs(self) -> tuple[str, ...]:
        """Attributes of instances: `self.x` used or assigned in any method, class-level names,
        properties; minus methods (``self.width`` -> ``self.area`` is not a plausible bug)."""
        found: dict[str, None] = {}
        called: set[str] = set()
        for stmt in block_body(self.node.body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    target = getattr(small, "target", None)
                    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [target]
                    for t in targets:
                        if isinstance(t, cst.Name):
                            found.setdefault(t.value)
        methods = set()
        for fn in self.methods:
            if decorated(fn, "property") or decorated(fn, "cached_property"):
                found.setdefault(fn.name.value)
            else:
                methods.add(fn.name.value)
            params = [*fn.params.posonly_params, *fn.params.params]
            if not params or decorated(fn, "staticmethod"):
                continue
            me = params[0].name.value
            for n in walk(fn.body):
                if isinstance(n, cst.Call) and self_attr(n.func, me):
                    called.add(n.func.attr.value)
                elif self_attr(n, me):
                    found.setdefault(n.attr.value)
        return tuple(a for a in found if a not in called and a not in methods)


def self_attr(node: cst.CSTNode, me: str | None) -> bool:
    return (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
            and node.value.value == me)


def block_body(body: cst.BaseSuite) -> Iterable[cst.CSTNode]:
    return body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ()


def is_str(node: cst.CSTNode) -> bool:
    return isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))


def int_value(node: cst.CSTNode) -> tuple[cst.BaseExpression, int] | None:
    """(literal node, value) for `7` and `-7`; None otherwise."""
    if (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
            and isinstance(node.expression, cst.Integer) and not node.expression.lpar):
        inner = int_value(node.expression)
        return (node, -inner[1]) if inner else None
    if isinstance(node, cst.Integer):
        try:
            return node, int(node.evaluated_value)
        except (ValueError, SyntaxError):
            return None
    return None


def is_one(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Integer) and not node.lpar and node.value == "1"


def call_name(node: cst.Call) -> str | None:
    if isinstance(node.func, cst.Name):
        return node.func.value
    if isinstance(node.func, cst.Attribute):
        return node.func.attr.value
    return None
