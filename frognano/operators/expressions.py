"""Operators that replace one expression by another: comparisons, arithmetic, boolean
operators, negations, constants and bounds, arguments, names, calls and returned values."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .context import FunctionContext, Op, Site
from .nodes import BIN_PREC, call_name, int_value, is_one, is_str, parenthesize, prec, self_attr


_REL = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">",
        cst.GreaterThanEqual: ">=", cst.Equal: "==", cst.NotEqual: "!="}
_NEGATED = {cst.Is: cst.IsNot, cst.IsNot: cst.Is, cst.In: cst.NotIn, cst.NotIn: cst.In}
_CMP_TEXT = {**_REL, cst.Is: "is", cst.IsNot: "is not", cst.In: "in", cst.NotIn: "not in"}


class Compare(Op):
    name, family, inverse = "compare", "operator", "compare"
    description = "flip a comparison: < <= > >= == != to one another, is/is not, in/not in"

    def sites(self, func):
        for node in func.of_type(cst.Comparison):
            for i, target in enumerate(node.comparisons):
                op = target.operator
                kind = type(op)
                kinds = [k for k in _REL if k is not kind] if kind in _REL else [_NEGATED.get(kind)]
                for new_kind in filter(None, kinds):
                    ws = {"whitespace_before": op.whitespace_before, "whitespace_after": op.whitespace_after}
                    comparisons = list(node.comparisons)
                    comparisons[i] = target.with_changes(operator=new_kind(**ws))
                    yield Site(node, node.with_changes(comparisons=comparisons),
                               f"`{_CMP_TEXT[kind]}` -> `{_CMP_TEXT[new_kind]}`")


_BIN_TEXT = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.Divide: "/",
             cst.FloorDivide: "//", cst.Modulo: "%", cst.Power: "**", cst.BitAnd: "&",
             cst.BitOr: "|", cst.BitXor: "^", cst.LeftShift: "<<", cst.RightShift: ">>"}
_BIN_BY_TEXT = {v: k for k, v in _BIN_TEXT.items()}
_AUG_TEXT = {cst.AddAssign: "+", cst.SubtractAssign: "-", cst.MultiplyAssign: "*",
             cst.DivideAssign: "/", cst.FloorDivideAssign: "//", cst.ModuloAssign: "%",
             cst.PowerAssign: "**", cst.BitAndAssign: "&", cst.BitOrAssign: "|",
             cst.BitXorAssign: "^", cst.LeftShiftAssign: "<<", cst.RightShiftAssign: ">>"}
_AUG_BY_TEXT = {v: k for k, v in _AUG_TEXT.items()}
# Symmetric, so arith is its own inverse.
_ARITH_SWAPS = {"+": ["-"], "-": ["+"], "*": ["/", "//", "**"], "/": ["*", "//"],
                "//": ["*", "/", "%"], "%": ["//"], "**": ["*"], "&": ["|", "^"],
                "|": ["&", "^"], "^": ["&", "|"], "<<": [">>"], ">>": ["<<"]}


class Arith(Op):
    name, family, inverse = "arith", "operator", "arith"
    description = "swap an arithmetic or bitwise operator (+ -, * / // % **, & | ^, << >>), augmented too"

    def sites(self, func):
        for node in func.of_type(cst.BinaryOperation, cst.AugAssign):
            if isinstance(node, cst.BinaryOperation):
                # String concatenation/formatting/repetition: swapping gives TypeErrors, not bugs.
                if is_str(node.left) or is_str(node.right):
                    continue
                text, by_text, suffix = _BIN_TEXT.get(type(node.operator)), _BIN_BY_TEXT, ""
            else:
                if is_str(node.value):
                    continue
                text, by_text, suffix = _AUG_TEXT.get(type(node.operator)), _AUG_BY_TEXT, "="
            op = node.operator
            for other in _ARITH_SWAPS.get(text, ()):
                new_op = by_text[other](whitespace_before=op.whitespace_before,
                                        whitespace_after=op.whitespace_after)
                yield Site(node, node.with_changes(operator=new_op),
                           f"`{text}{suffix}` -> `{other}{suffix}`")


class BoolOp(Op):
    name, family, inverse = "boolop", "operator", "boolop"
    description = "swap `and` and `or`"

    def sites(self, func):
        for node in func.of_type(cst.BooleanOperation):
            op = node.operator
            is_and = isinstance(op, cst.And)
            new_op = (cst.Or if is_and else cst.And)(whitespace_before=op.whitespace_before,
                                                      whitespace_after=op.whitespace_after)
            yield Site(node, node.with_changes(operator=new_op),
                       "`and` -> `or`" if is_and else "`or` -> `and`")


def _conditions(func: FunctionContext) -> Iterator[cst.BaseExpression]:
    """Expressions used as conditions: if/elif/while tests, ternary tests, and/or operands,
    and returned comparisons."""
    for node in func.nodes:
        if isinstance(node, (cst.If, cst.While, cst.IfExp)):
            yield node.test
        elif isinstance(node, cst.BooleanOperation):
            yield node.left
            yield node.right
        elif isinstance(node, cst.Return) and isinstance(node.value, cst.Comparison):
            yield node.value


class AddNot(Op):
    name, family, inverse = "add_not", "control", "remove_not"
    description = "negate a condition: `c` -> `not c`"

    def sites(self, func):
        for cond in _conditions(func):
            if isinstance(cond, cst.UnaryOperation) and isinstance(cond.operator, cst.Not):
                continue  # `not not c` is no bug anyone writes; remove_not covers the other way
            inner = parenthesize(cond) if prec(cond) <= 4 else cond
            new = cst.UnaryOperation(operator=cst.Not(), expression=inner)
            yield Site(cond, func.fit(cond, new, adopt_parens=False),
                       f"`{func.code(cond)}` -> `not {func.code(inner)}`")


class RemoveNot(Op):
    name, family, inverse = "remove_not", "control", "add_not"
    description = "drop a negation: `not x` -> `x`"

    def sites(self, func):
        for node in func.of_type(cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                yield Site(node, func.fit(node, node.expression),
                           f"`{func.code(node)}` -> `{func.code(node.expression)}`")


def _int_node(value: int, like: str = "") -> cst.BaseExpression:
    # Keep the literal's base: 0x10 -> 0x11, not 17.
    prefix = like[:2].lower()
    fmt = {"0x": hex, "0o": oct, "0b": bin}.get(prefix, str)
    text = fmt(abs(value))
    if value < 0:
        return cst.UnaryOperation(operator=cst.Minus(), expression=cst.Integer(text))
    return cst.Integer(text)


class OffByOne(Op):
    name, family, inverse = "off_by_one", "bound", "off_by_one"
    description = "integer constant n -> n + 1 and n - 1"

    def sites(self, func):
        for node in func.nodes:
            found = int_value(node)
            if found is None:
                continue
            parent = func.parent(node)
            if isinstance(node, cst.Integer) and int_value(parent) is not None:
                continue  # the `7` of `-7`: handled as the whole negative literal
            if isinstance(parent, cst.Attribute):
                continue  # `1 .real` and friends
            literal, value = found
            digits = literal.value if isinstance(literal, cst.Integer) else literal.expression.value
            for delta in (1, -1):
                new = func.fit(node, _int_node(value + delta, digits))
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


def _bound_exprs(func: FunctionContext) -> Iterator[tuple[cst.BaseExpression, bool]]:
    """(expression, may_grow): slice bounds, range() start/stop, enumerate() start, and
    `x[i ± 1]` indices (these may only shrink: `d[key]` -> `d[key + 1]` is noise)."""
    for node in func.nodes:
        if isinstance(node, cst.Slice):
            for e in (node.lower, node.upper):
                if e is not None:
                    yield e, True
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            args = node.args
            if any(a.star for a in args):
                continue
            positional = [a.value for a in args if a.keyword is None]
            if node.func.value == "range" and len(positional) == len(args):
                yield from ((e, True) for e in positional[:2])
            elif node.func.value == "enumerate":
                start = [a.value for a in args if a.keyword and a.keyword.value == "start"]
                yield from ((e, True) for e in (positional[1:2] or start))
        elif isinstance(node, cst.Index):
            v = node.value
            if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, (cst.Add, cst.Subtract)) \
                    and is_one(v.right):
                yield v, False


class Bound(Op):
    name, family, inverse = "bound", "bound", "bound"
    description = "shift a slice bound, range()/enumerate() argument or index: E -> E ± 1, X ± 1 -> X"

    def sites(self, func):
        for e, may_grow in _bound_exprs(func):
            if int_value(e) is not None:
                continue  # plain literals belong to off_by_one
            if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, (cst.Add, cst.Subtract)) \
                    and is_one(e.right):
                # X + 1 -> X, X - 1 -> X, and X + 1 <-> X - 1: the inverses of E -> E ± 1.
                flipped = (cst.Subtract if isinstance(e.operator, cst.Add) else cst.Add)(
                    whitespace_before=e.operator.whitespace_before,
                    whitespace_after=e.operator.whitespace_after)
                for new in (func.fit(e, e.left), e.with_changes(operator=flipped)):
                    yield Site(e, new, f"`{func.code(e)}` -> `{func.code(new)}`")
            elif may_grow:
                left = parenthesize(e) if prec(e) < 10 else e
                for op in (cst.Add, cst.Subtract):
                    new = cst.BinaryOperation(left=left, operator=op(), right=cst.Integer("1"))
                    new = func.fit(e, new, adopt_parens=False)
                    yield Site(e, new, f"`{func.code(e)}` -> `{func.code(new)}`")


_COMMUTATIVE_CALLS = {"max", "min", "print"}
_NON_COMMUTATIVE = (cst.Subtract, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power,
                    cst.LeftShift, cst.RightShift)


class SwapArgs(Op):
    name, family, inverse = "swap_args", "name", "swap_args"
    description = "swap adjacent positional arguments, or the operands of - / // % ** << >>"

    def sites(self, func):
        for node in func.of_type(cst.Call, cst.BinaryOperation):
            if isinstance(node, cst.Call):
                if call_name(node) in _COMMUTATIVE_CALLS:
                    continue
                args = node.args
                for i in range(len(args) - 1):
                    a, b = args[i], args[i + 1]
                    if a.keyword or b.keyword or a.star or b.star:
                        continue
                    new_args = list(args)
                    new_args[i] = a.with_changes(value=b.value)  # commas and spacing stay put
                    new_args[i + 1] = b.with_changes(value=a.value)
                    yield Site(node, node.with_changes(args=new_args),
                               f"swap `{func.code(a.value)}` and `{func.code(b.value)}`")
            elif isinstance(node.operator, _NON_COMMUTATIVE):
                if is_str(node.left) or is_str(node.right):
                    continue
                p = BIN_PREC[type(node.operator)]
                left, right = node.right, node.left
                if prec(left) < p or (p == 13 and prec(left) <= p):  # ** is right-associative
                    left = parenthesize(left)
                if prec(right) <= p:
                    right = parenthesize(right)
                new = node.with_changes(left=left, right=right)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


MAX_NAME_CANDIDATES = 8  # substitutes per use; the nearest-bound names are the plausible ones


class WrongName(Op):
    name, family, inverse = "wrong_name", "name", "wrong_name"
    description = "use another local variable, or another attribute of self (`self.w` -> `self.h`)"

    def sites(self, func):
        me = func.self_name
        attrs = func.class_info.data_attrs if (func.class_info and me) else ()
        for node in func.of_type(cst.Name, cst.Attribute):
            if isinstance(node, cst.Name):
                line = func.prepared.positions[node].start.line
                if node.value not in func.locals or not func.is_load(node):
                    continue
                # Names bound before this line, nearest first; later ones would be unbound.
                bound = [(n, ln) for n, ln in func.locals.items() if n != node.value and ln < line]
                bound.sort(key=lambda item: -item[1])
                beside = _compared_with(func, node)
                for other, _ in bound[:MAX_NAME_CANDIDATES]:
                    if other in beside:
                        continue
                    yield Site(node, node.with_changes(value=other), f"`{node.value}` -> `{other}`")
            elif self_attr(node, me) and node.attr.value in attrs and func.is_load(node):
                parent = func.parent(node)
                if isinstance(parent, cst.Call) and parent.func is node:
                    continue
                others = [a for a in attrs if a != node.attr.value][:MAX_NAME_CANDIDATES]
                beside = _compared_with(func, node)
                for other in others:
                    if f"{me}.{other}" in beside:
                        continue
                    new = node.with_changes(attr=node.attr.with_changes(value=other))
                    yield Site(node, new, f"`{me}.{node.attr.value}` -> `{me}.{other}`")


def _compared_with(func, node: cst.CSTNode) -> set[str]:
    """The code of the operands ``node`` is compared with directly (``a < node <= b``): a
    name put in their place would compare a value with itself (``n > n``), a constant in
    disguise that drop_operand or remove_condition states plainly; on more-itertools 06f3181
    ``(r > n)`` -> ``(n > n)`` passed the tests and was offered as the fix."""
    parent = func.parent(node)
    if isinstance(parent, cst.ComparisonTarget):
        parent = func.parent(parent)
    if not isinstance(parent, cst.Comparison):
        return set()
    operands = [parent.left, *(t.comparator for t in parent.comparisons)]
    at = next((i for i, o in enumerate(operands) if o is node), None)
    if at is None:
        return set()
    return {func.code(operands[j]) for j in (at - 1, at + 1) if 0 <= j < len(operands)}


class DropOperand(Op):
    name, family, inverse = "drop_operand", "control", "add_operand"
    description = "drop one operand of and/or: `a and b` -> `a` or `b`"

    def sites(self, func):
        for node in func.of_type(cst.BooleanOperation):
            for kept in (node.left, node.right):
                new = func.fit(node, kept)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


class RemoveCall(Op):
    name, family, inverse = "remove_call", "statement", "wrap_call"
    description = "unwrap a one-argument call: `f(x)` -> `x`"

    def sites(self, func):
        for node in func.of_type(cst.Call):
            if len(node.args) != 1 or not isinstance(node.func, (cst.Name, cst.Attribute)):
                continue
            arg = node.args[0]
            if arg.keyword is not None or arg.star:
                continue
            value = arg.value
            if not value.lpar and "\n" in func.module.code_for_node(value):
                value = parenthesize(value)  # its line breaks relied on the call's brackets
            new = func.fit(node, value)
            yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


def _name_is(node: cst.CSTNode | None, *values: str) -> bool:
    return isinstance(node, cst.Name) and node.value in values


class ReturnValue(Op):
    name, family, inverse = "return_value", "constant", "return_value"
    description = "change a returned value: `return X` -> `return None`, True <-> False"

    def sites(self, func):
        for node in func.of_type(cst.Return):
            value = node.value
            if value is None or _name_is(value, "None") or isinstance(value, cst.Yield):
                continue
            choices = ["None"]
            if _name_is(value, "True", "False"):
                choices = ["False" if value.value == "True" else "True", "None"]
            for choice in choices:
                new = func.fit(value, cst.Name(choice), adopt_parens=False)
                yield Site(value, new, f"`return {func.code(value)}` -> `return {choice}`")


def _is_empty_literal(node: cst.CSTNode) -> bool:
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return not node.elements
    if isinstance(node, cst.Dict):
        return not node.elements
    if isinstance(node, cst.SimpleString):
        return len(node.value) - len(node.prefix) in (2, 6)  # '' "" '''''' """"""
    return False


def _constant_changes(func: FunctionContext, node: cst.CSTNode, *, defaults: bool
                      ) -> Iterator[Site]:
    if _name_is(node, "True", "False"):
        other = "False" if node.value == "True" else "True"
        targets = [other, "None"]
    elif _name_is(node, "None"):
        targets = ["0"] if defaults else ["True", "False"]
    elif _is_empty_literal(node):
        targets = ["None"]
    elif defaults and int_value(node) is not None:
        literal, value = int_value(node)
        digits = literal.value if isinstance(literal, cst.Integer) else literal.expression.value
        for delta in (1, -1):
            new = func.fit(node, _int_node(value + delta, digits), adopt_parens=False)
            yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")
        return
    else:
        return
    for target in targets:
        new = cst.Integer(target) if target.isdigit() else cst.Name(target)
        new = func.fit(node, new, adopt_parens=False)
        yield Site(node, new, f"`{func.code(node)}` -> `{target}`")


class DefaultArg(Op):
    name, family, inverse = "default_arg", "constant", "default_arg"
    description = "change a parameter default: True <-> False, None -> 0, n -> n ± 1, [] {} () '' -> None"

    def sites(self, func):
        p = func.node.params
        for param in (*p.posonly_params, *p.params, *p.kwonly_params):
            if param.default is not None:
                yield from _constant_changes(func, param.default, defaults=True)


class Constant(Op):
    name, family, inverse = "constant", "constant", "constant"
    description = "change a constant: True <-> False, True/False <-> None, [] {} () '' -> None (ints: off_by_one)"

    def sites(self, func):
        for node in func.nodes:
            parent = func.parent(node)
            if isinstance(parent, cst.Return):
                continue  # returned constants belong to return_value
            if isinstance(parent, cst.Attribute) and parent.value is node:
                continue  # "".join(...): None.join is no plausible bug
            if isinstance(parent, cst.ConcatenatedString):
                continue  # `"" "x"`: None cannot stand in an implicit concatenation
            if isinstance(parent, cst.ComparisonTarget) and isinstance(parent.operator, (cst.Is, cst.IsNot)) \
                    and _name_is(node, "None"):
                continue  # `x is None` -> `x is True`: compare's `is not` is the plausible bug
            if isinstance(node, (cst.Name, cst.List, cst.Tuple, cst.Set, cst.Dict, cst.SimpleString)):
                if isinstance(node, cst.Name) and not func.is_load(node):
                    continue
                yield from _constant_changes(func, node, defaults=False)
