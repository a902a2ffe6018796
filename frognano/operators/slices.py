"""The ``slice`` operator: the wrong end of a sequence (``xs[1:]`` <-> ``xs[:-1]``,
``xs[:n]`` <-> ``xs[n:]``) and a forgotten or extra reversal (``xs`` <-> ``xs[::-1]``).

Shifting a bound by one is ``bound``'s and ``off_by_one``'s; this operator only moves a bound to
the other side or toggles the reversing step, so the two never offer the same edit.
"""

from __future__ import annotations

import libcst as cst

from .context import FunctionContext, Op, Site
from .nodes import int_value


def _neg(k: int) -> cst.BaseExpression:
    return cst.UnaryOperation(operator=cst.Minus(), expression=cst.Integer(str(k)))


def _negated(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """-node for an integer literal or a (dotted) name, and node for -node; None otherwise."""
    value = int_value(node)
    if value is not None:
        return None if value[1] == 0 else (_neg(value[1]) if value[1] > 0 else cst.Integer(str(-value[1])))
    if isinstance(node, (cst.Name, cst.Attribute)) and not node.lpar:
        return cst.UnaryOperation(operator=cst.Minus(), expression=node)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and not node.lpar \
            and isinstance(node.expression, (cst.Name, cst.Attribute)):
        return node.expression
    return None


def _one_slice(node: cst.Subscript) -> cst.Slice | None:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
        return node.slice[0].slice
    return None


def _with_slice(node: cst.Subscript, new: cst.Slice) -> cst.Subscript:
    return node.with_changes(slice=[node.slice[0].with_changes(slice=new)])


def _is_minus_one(node: cst.CSTNode | None) -> bool:
    found = int_value(node) if node is not None else None
    return found is not None and found[1] == -1


_LIST_CALLS = frozenset({"sorted", "list"})


def _list_valued(node: cst.CSTNode) -> bool:
    return isinstance(node, (cst.List, cst.ListComp)) or (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in _LIST_CALLS)


def _lists(func: FunctionContext) -> set[str]:
    """Locals bound to a list display, comprehension, sorted() or list() call."""
    out = set()
    for node in func.of_type(cst.Assign):
        if _list_valued(node.value):
            out |= {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
    return out


def _reversible(node: cst.CSTNode, lists: set[str]) -> bool:
    """A sequence whose order is plausibly backwards: a sorted()/list() call, or a returned
    local that holds a list the function built."""
    return _list_valued(node) and isinstance(node, cst.Call) or (
        isinstance(node, cst.Name) and node.value in lists)


class SliceEnd(Op):
    name, family, inverse = "slice", "slice", "slice"
    description = ("slice the other end: `xs[1:]` <-> `xs[:-1]`, `xs[:n]` <-> `xs[n:]` or `xs[-n:]`; drop "
                   "`[::-1]`, or add it to a sorted()/list() or a returned list")

    def sites(self, func):
        for node in func.of_type(cst.Subscript):
            sl = _one_slice(node)
            if sl is None:
                continue
            lower, upper, step = sl.lower, sl.upper, sl.step
            if step is None and (lower is None) != (upper is None):
                bound = lower if lower is not None else upper
                news = [bound]
                negated = _negated(bound)
                if negated is not None:
                    news.append(negated)  # `[1:]` -> `[:-1]`, `[:keep]` -> `[-keep:]`, and back
                for moved in news:
                    new_slice = cst.Slice(lower=None, upper=moved) if lower is not None else \
                        cst.Slice(lower=moved, upper=None)
                    new = _with_slice(node, new_slice)
                    yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")
            elif lower is None and upper is None and _is_minus_one(step):
                new = func.fit(node, node.value)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")
        lists = _lists(func)
        for node in func.nodes:
            if isinstance(node, cst.For):
                target = node.iter
                if not isinstance(target, cst.Call):
                    continue  # `for x in xs` -> `xs[::-1]`: too many loops for a rare bug
            elif isinstance(node, cst.Return) and node.value is not None:
                target = node.value
            else:
                continue
            if _reversible(target, lists):
                new = cst.Subscript(value=target, slice=[cst.SubscriptElement(
                    cst.Slice(lower=None, upper=None, step=_neg(1)))])
                yield Site(target, new, f"`{func.code(target)}` -> `{func.code(new)}`")
