"""Operators on the conditions that protect code: a guard added in front of an if/while test
(``add_operand``, the sited inverse of ``drop_operand``) and the loop condition of a
``while True`` that should have stopped when its collection ran out (``loop_condition``).

Guards are drawn from the names the condition itself uses, and the kind of guard from how it
uses them: a compared or dereferenced name gets a None check, a subscripted or measured one an
emptiness check, ``d[k]`` a membership check.  A few per condition, not every name in scope.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .context import FunctionContext, Op, Site
from .nodes import parenthesize, prec, self_attr, walk

MAX_GUARDS = 5  # guarded variants of one condition
MAX_LOOP_NAMES = 2
_ORDER = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)  # collections tried as the condition of one `while True`


def _text(func: FunctionContext, node: cst.CSTNode) -> str:
    return func.module.code_for_node(node)


def _guardable(func: FunctionContext, node: cst.CSTNode) -> bool:
    """A local name (parameters included) or `self.attr`, read where it stands."""
    if isinstance(node, cst.Name):
        return node.value in func.locals and func.is_load(node)
    return self_attr(node, func.self_name) and func.is_load(node)


def _guards(func: FunctionContext, cond: cst.BaseExpression) -> Iterator[tuple[str, cst.BaseExpression]]:
    """(operator, guard) pairs for `cond`, most specific first: `k in d and`, then emptiness
    (`xs and`, `not xs or`), then None (`x is not None and`, `x is None or`)."""
    membership, emptiness, nones, derefs = [], [], [], []
    compared_to_none = set()
    for node in walk(cond):
        if isinstance(node, cst.Subscript) and _guardable(func, node.value) and len(node.slice) == 1:
            index = node.slice[0].slice
            key = index.value if isinstance(index, cst.Index) else None
            if isinstance(key, cst.Name) and _guardable(func, key):
                membership.append(cst.Comparison(left=key, comparisons=[
                    cst.ComparisonTarget(cst.In(), node.value)]))
            else:
                emptiness.append(node.value)
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "len" \
                and len(node.args) == 1 and _guardable(func, node.args[0].value):
            emptiness.append(node.args[0].value)
        elif isinstance(node, cst.Comparison):
            for left, target in zip([node.left, *(t.comparator for t in node.comparisons)], node.comparisons):
                right = target.comparator
                if isinstance(target.operator, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) \
                        and right.value == "None":
                    compared_to_none.add(_text(func, left))
                    continue
                if isinstance(target.operator, _ORDER):  # `None < 3` raises; `None == 3` does not
                    nones += [e for e in (left, right) if _guardable(func, e)]
        elif isinstance(node, cst.Attribute) and _guardable(func, node.value):
            derefs.append(node.value)  # `x.value`: x may be None
    seen: set[str] = set()
    for op, guards in (("and", membership), ("emptiness", emptiness), ("none", derefs + nones)):
        for guard in guards:
            key = f"{op}:{_text(func, guard)}"
            if key in seen or _text(func, guard) in compared_to_none:
                continue
            seen.add(key)
            if op == "and":
                yield "and", guard
            elif op == "emptiness":
                yield "and", guard
                yield "or", cst.UnaryOperation(cst.Not(), guard)
            else:
                yield "and", cst.Comparison(left=guard, comparisons=[cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))])
                yield "or", cst.Comparison(left=guard, comparisons=[cst.ComparisonTarget(cst.Is(), cst.Name("None"))])


class AddGuard(Op):
    name, family, inverse = "add_operand", "guard", "drop_operand"
    description = ("guard an if/while/ternary test or a returned one with a name it uses: `k in d and c`, `xs and c`, "
                   "`not xs or c`, `x is not None and c`, `x is None or c`")

    def sites(self, func):
        for node in func.of_type(cst.If, cst.While, cst.IfExp, cst.Return):
            if isinstance(node, cst.Return):
                # `return now >= self.expires_at`: a returned test is a condition too.
                if not isinstance(node.value, (cst.Comparison, cst.BooleanOperation)):
                    continue
                cond = node.value
            else:
                cond = node.test
            count = 0
            for op, guard in _guards(func, cond):
                if count == MAX_GUARDS:
                    break
                is_and = op == "and"
                # `g and (a or b)`: the test stays one operand; `g and a and b` needs no brackets.
                right = parenthesize(cond) if not cond.lpar and prec(cond) < (3 if is_and else 2) else cond
                new = cst.BooleanOperation(left=guard, operator=cst.And() if is_and else cst.Or(), right=right)
                new = func.fit(cond, new, adopt_parens=False)
                count += 1
                yield Site(cond, new, f"`{func.code(cond)}` -> `{func.code(new)}`")


_POPS = frozenset({"pop", "popleft", "popitem", "get_nowait"})


def _collections(func: FunctionContext, loop: cst.While) -> list[str]:
    """Locals bound before the loop that its body takes items from (`queue.pop()`), then ones
    the body grows or reads by index: what `while True` most plausibly meant to exhaust."""
    line = func.prepared.positions[loop].start.line
    bound = {n for n, ln in func.locals.items() if ln < line}
    popped, used = [], []
    for node in walk(loop.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and isinstance(node.func.value, cst.Name) and node.func.value.value in bound:
            (popped if node.func.attr.value in _POPS else used).append(node.func.value.value)
        elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value in bound:
            used.append(node.value.value)
    return list(dict.fromkeys(popped or used))[:MAX_LOOP_NAMES]


class LoopCondition(Op):
    name, family, inverse = "loop_condition", "loop", "loop_condition"
    description = "`while True` -> `while queue` for a collection the loop takes from, and back"

    def sites(self, func):
        for loop in func.of_type(cst.While):
            test = loop.test
            if not isinstance(test, cst.Name) or test.lpar:
                continue
            if test.value == "True":
                for name in _collections(func, loop):
                    yield Site(test, cst.Name(name), f"`while True` -> `while {name}`")
            elif test.value in func.locals:
                yield Site(test, cst.Name("True"), f"`while {test.value}` -> `while True`")
