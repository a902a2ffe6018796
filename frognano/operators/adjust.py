"""Operators that adjust a value where it is used: `e` -> `e ± 1` on integer-valued expressions
(add_one, undone by drop_one), `e` -> `abs(e)` / `len(e)` / `int(e)` / `sorted(e)` (wrap, undone
by remove_call) and `a - b` -> `max(0, a - b)` (clamp, undone by unclamp).

``off_by_one`` shifts literals and ``bound`` shifts slice and range bounds; a dropped `+ 1` on
`len(xs)`, `n // 2` or an index name in an argument, subscript, comparison or return is neither.
Which expressions are integers is a syntactic guess (``_IntGuess``): `len()`/`int()`/`ord()`
and friends, `//`, `%` and `+ - *` of integers, and names bound by `range`/`enumerate` loops,
bound from such expressions, compared with them, or used as indices of sequences and as range
bounds.  Guessing keeps the sites few: floats, strings and dict keys are left alone.  Wrappers
likewise go only where they fit the value's use (a difference, a quotient, a collection
measured or iterated).
"""

from __future__ import annotations

import weakref

import libcst as cst

from .context import FunctionContext, Op, Site
from .nodes import call_name, int_value, is_one, is_str, parenthesize, prec
from .scope import module_scope

_INT_FUNCS = {"len", "int", "ord", "round", "hash", "id"}
_INT_METHODS = {"count", "index", "find", "rfind", "rindex", "bit_length"}
_ORDERING = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def _one_arg(call: cst.Call) -> bool:
    return len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star


class _IntGuess:
    """Which expressions of one function hold integers, by their shape alone."""

    def __init__(self, func: FunctionContext) -> None:
        self.names: set[str] = set()
        sequences = _sequences(func)
        for node in func.nodes:
            if isinstance(node, (cst.For, cst.CompFor)) and isinstance(node.iter, cst.Call):
                target, fname = node.target, call_name(node.iter)
                if fname == "range" and isinstance(target, cst.Name):
                    self.names.add(target.value)
                elif fname == "enumerate" and isinstance(target, cst.Tuple) and target.elements \
                        and isinstance(target.elements[0].value, cst.Name):
                    self.names.add(target.elements[0].value.value)
            elif isinstance(node, cst.Subscript) and _name_in(node.value, sequences):
                # An index of a sequence (measured or sliced here); `d[key]` of a dict is not.
                self.names.update(e.slice.value.value for e in node.slice
                                  if isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name))
            elif isinstance(node, cst.Call) and call_name(node) == "range" and isinstance(node.func, cst.Name):
                self.names.update(a.value.value for a in node.args if isinstance(a.value, cst.Name))
        # Bound from or compared with integers: twice, so `n = len(xs); half = n // 2` makes
        # both integers.
        for _ in range(2):
            for node in func.nodes:
                if isinstance(node, cst.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0].target, cst.Name) and self(node.value):
                    self.names.add(node.targets[0].target.value)
                elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name) \
                        and node.value is not None and self(node.value) \
                        and not isinstance(node.operator if isinstance(node, cst.AugAssign) else None, cst.DivideAssign):
                    self.names.add(node.target.value)
                elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.FloorDivide, cst.Modulo)) \
                        and not is_str(node.left):
                    self.names.update(n.value for n in (node.left, node.right) if isinstance(n, cst.Name))
                elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1 \
                        and isinstance(node.comparisons[0].operator, _ORDERING):
                    a, b = node.left, node.comparisons[0].comparator
                    for one, other in ((a, b), (b, a)):
                        if isinstance(one, cst.Name) and self(other):
                            self.names.add(one.value)

    def __call__(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Integer):
            return True
        if isinstance(node, cst.Name):
            return node.value in self.names
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return self(node.expression)
        if isinstance(node, cst.Call):
            name = call_name(node)
            if isinstance(node.func, cst.Name):
                if name in ("min", "max", "abs") and node.args:
                    return all(self(a.value) for a in node.args if not a.star and a.keyword is None)
                return name in _INT_FUNCS and (name != "round" or _one_arg(node))
            return name in _INT_METHODS
        if isinstance(node, cst.BinaryOperation):
            if is_str(node.left) or is_str(node.right) or isinstance(node.left, cst.Float) \
                    or isinstance(node.right, cst.Float):
                return False
            if isinstance(node.operator, cst.FloorDivide):
                return True
            if isinstance(node.operator, (cst.Modulo, cst.Add, cst.Subtract, cst.Multiply)):
                return self(node.left) and self(node.right)
        return False


def _name_in(node: cst.CSTNode, names: set[str]) -> bool:
    return isinstance(node, cst.Name) and node.value in names


def _sequences(func: FunctionContext) -> set[str]:
    """Names measured with len() or sliced in the function: sequences, whose indices are ints."""
    found: set[str] = set()
    for node in func.nodes:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "len" \
                and _one_arg(node) and isinstance(node.args[0].value, cst.Name):
            found.add(node.args[0].value.value)
        elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) \
                and any(isinstance(e.slice, cst.Slice) for e in node.slice):
            found.add(node.value.value)
    return found


def _is_plus_minus_one(node: cst.CSTNode) -> bool:
    return (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract))
            and is_one(node.right))


def _slot(func: FunctionContext, node: cst.CSTNode) -> bool:
    """Is `node` a whole argument, index, comparison or arithmetic operand, returned or
    assigned value?  Those are where a missing `± 1` hides; subexpressions of names and calls
    (`f` of `f(x)`, `xs` of `xs[i]`) are not values to shift."""
    parent = func.parent(node)
    if isinstance(parent, cst.Arg):
        call = func.parent(parent)
        # range()/enumerate() arguments are bound's; keyword names are not values.
        return not (isinstance(call, cst.Call) and call_name(call) in ("range", "enumerate")
                    and isinstance(call.func, cst.Name)) and parent.value is node
    if isinstance(parent, (cst.Index, cst.Return)):
        return True
    if isinstance(parent, cst.Lambda):  # `key=lambda c: c - value`: a returned value too
        return parent.body is node
    # Against a literal, `x + 1 > 18` is off_by_one's `x > 17`: only non-literal sides shift.
    if isinstance(parent, cst.ComparisonTarget):
        comparison = func.parent(parent)
        return len(comparison.comparisons) == 1 and int_value(comparison.left) is None
    if isinstance(parent, cst.Comparison):
        return parent.left is node and len(parent.comparisons) == 1 \
            and int_value(parent.comparisons[0].comparator) is None
    if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
        return parent.value is node
    if isinstance(parent, cst.BinaryOperation):
        return isinstance(parent.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide,
                                            cst.FloorDivide, cst.Modulo))
    return False


class AddOne(Op):
    name, family, inverse = "add_one", "bound", "drop_one"
    description = ("add or subtract one on an integer-valued expression (`len(xs)`, `n // 2`, an "
                   "index name) in an argument, index, comparison, return or assignment: e -> e ± 1")

    def sites(self, func):
        is_int = _IntGuess(func)
        for node in func.nodes:
            if int_value(node) is not None or _is_plus_minus_one(node):
                continue  # literals are off_by_one's; `x + 1` is drop_one's and arith's
            if isinstance(node, cst.Name) and not func.is_load(node):
                continue
            if not (_slot(func, node) and is_int(node)):
                continue
            parent = func.parent(node)
            if isinstance(parent, cst.BinaryOperation) and is_one(parent.right):
                continue  # `(n // 2) + 1` -> `n // 2 + 1 + 1`: no bug anyone writes
            left = parenthesize(node) if prec(node) < 10 else node
            for op in (cst.Add, cst.Subtract):
                new = cst.BinaryOperation(left=left, operator=op(), right=cst.Integer("1"))
                new = func.fit(node, new, adopt_parens=False)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


class DropOne(Op):
    name, family, inverse = "drop_one", "bound", "add_one"
    description = "drop a `+ 1` / `- 1`: e ± 1 -> e"

    def sites(self, func):
        for node in func.of_type(cst.BinaryOperation):
            if not _is_plus_minus_one(node) or is_str(node.left) or int_value(node.left) is not None:
                continue
            # Parentheses that only served the `± 1` go with it, so drop_one undoes add_one
            # exactly: `(a - b) + 1` -> `a - b`, `y * (n + 1)` -> `y * n`; fit puts back those
            # the context needs.  Multi-line text keeps them (its line breaks rely on them).
            left, adopt = node.left, True
            if len(left.lpar) == 1 and "\n" not in func.module.code_for_node(left):
                left = left.with_changes(lpar=[], rpar=[])
            if len(node.lpar) == 1 and "\n" not in func.module.code_for_node(node):
                adopt = False
            new = func.fit(node, left, adopt_parens=adopt)
            yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


_COLLECTIONS: weakref.WeakKeyDictionary[FunctionContext, set[str]] = weakref.WeakKeyDictionary()


def _collections(func: FunctionContext) -> set[str]:
    """_iterated_names, once per function for wrap and clamp both."""
    found = _COLLECTIONS.get(func)
    if found is None:
        found = _COLLECTIONS[func] = _iterated_names(func)
    return found


def _iterated_names(func: FunctionContext) -> set[str]:
    """Names the function treats as collections: iterated, measured, subscripted, searched."""
    names: set[str] = set()
    for node in func.nodes:
        if isinstance(node, (cst.For, cst.CompFor)) and isinstance(node.iter, cst.Name):
            names.add(node.iter.value)
        elif isinstance(node, cst.Call) and call_name(node) in ("len", "sorted", "set", "list") \
                and isinstance(node.func, cst.Name) and node.args and isinstance(node.args[0].value, cst.Name):
            names.add(node.args[0].value.value)
        elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name):
            names.add(node.value.value)
        elif isinstance(node, cst.ComparisonTarget) and isinstance(node.operator, (cst.In, cst.NotIn)) \
                and isinstance(node.comparator, cst.Name):
            names.add(node.comparator.value)
    return names



def _numeric_use(func: FunctionContext, node: cst.CSTNode) -> bool:
    """Does `node` stand where a number is expected: a range() argument, an arithmetic operand,
    an ordering comparison operand?"""
    parent = func.parent(node)
    if isinstance(parent, cst.Arg):
        call = func.parent(parent)
        return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "range"
    if isinstance(parent, cst.BinaryOperation):
        return not isinstance(parent.operator, cst.Modulo) and not is_str(parent.left)
    if isinstance(parent, cst.ComparisonTarget):
        return isinstance(parent.operator, _ORDERING)
    if isinstance(parent, cst.Comparison):
        return isinstance(parent.comparisons[0].operator, _ORDERING)
    return False


def _iteration_use(func: FunctionContext, node: cst.CSTNode, collections: set[str]) -> bool:
    """Is `node` iterated where order may matter (a for loop or comprehension, `sep.join(...)`),
    or aliased as a collection (`ordered = samples` then `ordered[mid]`: a bare alias of a
    collection is rarely the intent, a sorted copy often)?"""
    parent = func.parent(node)
    if isinstance(parent, (cst.For, cst.CompFor)):
        return parent.iter is node
    if isinstance(parent, cst.Assign):
        return parent.value is node and isinstance(node, (cst.Name, cst.Attribute)) \
            and len(parent.targets) == 1 and _name_in(parent.targets[0].target, collections)
    if isinstance(parent, cst.Arg) and parent.keyword is None:
        call = func.parent(parent)
        return isinstance(call, cst.Call) and call_name(call) == "join" and isinstance(call.func, cst.Attribute)
    return False


def _collection_like(node: cst.CSTNode) -> bool:
    if isinstance(node, (cst.Name, cst.Attribute)):
        return True
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
        and node.func.attr.value in ("keys", "values", "items") and not node.args


def _wrapped(name: str, value: cst.BaseExpression, zero_first: bool = False) -> cst.Call:
    value = value.with_changes(lpar=[], rpar=[])  # the call's brackets replace them
    args = [cst.Arg(value)]
    if zero_first:
        args.insert(0, cst.Arg(cst.Integer("0"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    return cst.Call(func=cst.Name(name), args=args)


class Wrap(Op):
    name, family, inverse = "wrap", "wrapper", "remove_call"
    description = ("wrap a value: a difference in `abs(e)`, a quotient in `int(e)`, a collection "
                   "used as a number in `len(e)`, an iterated one in `sorted(e)`")
    zero_clamp = False  # Clamp: `max(0, e)` instead

    def sites(self, func):
        scope = module_scope(func.prepared)
        collections = _collections(func)
        for node in func.nodes:
            for name in self._wrappers(func, node, collections):
                # A local or module name of the same spelling would shadow the builtin.
                if name in func.locals or name in scope.bound:
                    continue
                new = func.fit(node, _wrapped(name, node, self.zero_clamp), adopt_parens=False)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")

    def _wrappers(self, func: FunctionContext, node: cst.CSTNode, collections: set[str]) -> list[str]:
        found = []
        if isinstance(node, cst.BinaryOperation) and not (is_str(node.left) or is_str(node.right)):
            if isinstance(node.operator, cst.Subtract) and _slot(func, node) \
                    and not isinstance(func.parent(node), cst.BinaryOperation):
                found.append("abs")
            elif isinstance(node.operator, cst.Divide) and _slot(func, node):
                found.append("int")
        elif isinstance(node, cst.Name) and node.value in collections and func.is_load(node) \
                and _numeric_use(func, node):
            found.append("len")
        if _iteration_use(func, node, collections) and _collection_like(node):
            found.append("sorted")
        return found


class Clamp(Wrap):
    name, family, inverse = "clamp", "wrapper", "unclamp"
    description = "clamp a difference at zero: `a - b` -> `max(0, a - b)`"
    zero_clamp = True

    def _wrappers(self, func, node, collections):
        return ["max"] if "abs" in super()._wrappers(func, node, collections) else []


class Unclamp(Op):
    name, family, inverse = "unclamp", "wrapper", "clamp"
    description = "drop a clamp at zero: `max(0, e)` / `max(e, 0)` -> `e` (one-argument wrappers: remove_call)"

    def sites(self, func):
        for node in func.of_type(cst.Call):
            if not (isinstance(node.func, cst.Name) and node.func.value == "max" and len(node.args) == 2) \
                    or any(a.star or a.keyword for a in node.args):
                continue
            a, b = (arg.value for arg in node.args)
            if not (_is_zero(a) or _is_zero(b)):
                continue
            value = b if _is_zero(a) else a
            if not value.lpar and "\n" in func.module.code_for_node(value):
                value = parenthesize(value)  # its line breaks relied on the call's brackets
            new = func.fit(node, value)
            yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


def _is_zero(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Integer) and node.value == "0"
