"""Operators on exception handling, the shape real fixes often have: catch one more class, or
catch the failing tests' exception around the statement that raised it.

Counted on the developers' patches of the history corpus (``benchmarks/history/shapes.py``): a
`try`/`except` added around one statement and an `except` clause widened by a class are among
the commonest fixes that no expression-level operator reaches.  The classes come from what the
failing tests raised (``FunctionContext.raised``, from their messages) and from the confusable
builtins beside the class already caught.  Each operator has its inverse, for synthesis:
``extend_except`` / ``narrow_except``, ``wrap_try`` / ``unwrap_try``.
"""

from __future__ import annotations

import libcst as cst

from .context import Op, Site
from .nodes import walk
from .ingredients import EXCEPTION_CONFUSABLE
from .scope import BUILTIN_NAMES, dotted, looks_like_exception, module_scope

MAX_EXTRA_CLASSES = 3  # classes tried per `except` clause
MAX_RAISED = 2  # failing tests' exception classes tried per wrapped statement
# Statements worth wrapping: one plain statement that can raise (a call, a lookup, a conversion).
_WRAPPABLE = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr, cst.Return)


def _available(func, name: str) -> bool:
    """Whether ``name`` resolves in the function: a builtin exception, a module-level name
    (imported or defined) or a local."""
    head = name.split(".", 1)[0]
    if head in BUILTIN_NAMES:
        return looks_like_exception(name) or name in ("Exception", "BaseException")
    return head in module_scope(func.prepared).bound or head in func.locals


def _raised(func) -> list[str]:
    """The failing tests' exception classes that resolve here (``pkg.errors.ParseError`` is
    tried as ``ParseError`` when the module binds that name)."""
    out = []
    for name in func.raised:
        for candidate in (name, name.rsplit(".", 1)[-1]):
            if _available(func, candidate):
                out.append(candidate)
                break
    return list(dict.fromkeys(out))


def _tuple(names: list[str]) -> cst.Tuple:
    return cst.Tuple([cst.Element(cst.parse_expression(n)) for n in names],
                     lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class ExtendExcept(Op):
    name, family, inverse = "extend_except", "exception", "narrow_except"
    description = ("catch one more class: `except A` -> `except (A, B)`, B raised by the failing tests "
                   "or a builtin mistaken for A (KeyError/IndexError, ValueError/TypeError, ...)")

    def sites(self, func):
        raised = _raised(func)
        for handler in func.of_type(cst.ExceptHandler):
            kind = handler.type
            if kind is None:
                continue
            exprs = [el.value for el in kind.elements] if isinstance(kind, cst.Tuple) else [kind]
            names = [dotted(e) for e in exprs]
            if not all(names):
                continue  # `except errors:` or a computed class: nothing to extend safely
            confusable = [c for n in names for c in EXCEPTION_CONFUSABLE.get(n.rsplit(".", 1)[-1], ())]
            extra = [c for c in dict.fromkeys([*raised, *confusable])
                     if c not in names and _available(func, c)]
            for other in extra[:MAX_EXTRA_CLASSES]:
                new = _tuple([*names, other])
                yield Site(kind, new, f"`except {func.code(kind)}` -> `except {func.code(new)}`")


class NarrowExcept(Op):
    name, family, inverse = "narrow_except", "exception", "extend_except"
    description = "catch one class fewer: `except (A, B)` -> `except A`"

    def sites(self, func):
        for handler in func.of_type(cst.ExceptHandler):
            kind = handler.type
            if not isinstance(kind, cst.Tuple) or len(kind.elements) < 2:
                continue
            names = [dotted(el.value) for el in kind.elements]
            if not all(names):
                continue
            for i, dropped in enumerate(names):
                rest = names[:i] + names[i + 1:]
                new = _tuple(rest) if len(rest) > 1 else cst.parse_expression(rest[0])
                yield Site(kind, new, f"`except {func.code(kind)}` -> `except {', '.join(rest)}` (drop {dropped})")


def _in_loop(func, node: cst.CSTNode) -> bool:
    parent = func.parent(node)
    while parent is not None and parent is not func.node:
        if isinstance(parent, (cst.For, cst.While)):
            return True
        if isinstance(parent, (cst.FunctionDef, cst.Lambda)):
            return False
        parent = func.parent(parent)
    return False


def _handler(name: str, body: cst.BaseSmallStatement) -> cst.ExceptHandler:
    return cst.ExceptHandler(body=cst.IndentedBlock([cst.SimpleStatementLine([body])]),
                             type=cst.parse_expression(name))


class WrapTry(Op):
    name, family, inverse = "wrap_try", "exception", "unwrap_try"
    description = ("catch the failing tests' exception around one statement: `x = f(a)` -> "
                   "`try: x = f(a) except E: pass` (in a loop also `continue`)")

    def sites(self, func):
        raised = [r for r in _raised(func) if r not in ("Exception", "BaseException")][:MAX_RAISED]
        if not raised:
            return
        for stmt in func.of_type(cst.SimpleStatementLine):
            if len(stmt.body) != 1 or not isinstance(stmt.body[0], _WRAPPABLE):
                continue
            if not self._can_raise(stmt) or self._handled(func, stmt):
                continue
            bodies: list[cst.BaseSmallStatement] = [cst.Pass()]
            if _in_loop(func, stmt) and not isinstance(stmt.body[0], cst.Return):
                bodies.append(cst.Continue())
            inner = stmt.with_changes(leading_lines=())
            for name in raised:
                for body in bodies:
                    new = cst.Try(body=cst.IndentedBlock([inner]), handlers=[_handler(name, body)],
                                  leading_lines=stmt.leading_lines)
                    what = "pass" if isinstance(body, cst.Pass) else "continue"
                    yield Site(stmt, new, f"wrap `{func.code(stmt)}` in `try` ... `except {name}: {what}`")

    @staticmethod
    def _can_raise(stmt: cst.SimpleStatementLine) -> bool:
        """`out = []`, `self.width = width` and `return None` raise nothing a handler could be
        meant for: only what the statement evaluates counts (not the target it assigns)."""
        value = getattr(stmt.body[0], "value", None)
        if value is None:
            return False
        return any(isinstance(n, (cst.Call, cst.Subscript, cst.Attribute, cst.BinaryOperation))
                   for n in walk(value))

    @staticmethod
    def _handled(func, stmt: cst.SimpleStatementLine) -> bool:
        """Already in a `try` body or an `except` clause: another `try` is not the fix's shape."""
        block = func.parent(stmt)
        return block is None or isinstance(func.parent(block), (cst.Try, cst.ExceptHandler, cst.Module))


class UnwrapTry(Op):
    name, family, inverse = "unwrap_try", "exception", "wrap_try"
    description = "let the exception through: `try: S except E: pass` (one statement) -> `S`"

    def sites(self, func):
        for node in func.of_type(cst.Try):
            if node.orelse is not None or node.finalbody is not None or len(node.handlers) != 1:
                continue
            body = node.body
            if not isinstance(body, cst.IndentedBlock) or len(body.body) != 1:
                continue
            inner = body.body[0]
            if not isinstance(inner, cst.SimpleStatementLine) or len(inner.body) != 1:
                continue
            handler = node.handlers[0].body
            if not isinstance(handler, cst.IndentedBlock) or len(handler.body) != 1:
                continue
            only = handler.body[0]
            if not (isinstance(only, cst.SimpleStatementLine) and len(only.body) == 1
                    and isinstance(only.body[0], (cst.Pass, cst.Continue))):
                continue
            yield Site(node, inner.with_changes(leading_lines=node.leading_lines),
                       f"unwrap `try: {func.code(inner)}` (drop its `except`)")
