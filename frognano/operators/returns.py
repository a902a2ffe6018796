"""Missing returns: ``insert_return`` adds one where a function or an if-branch falls off its
end (the last assigned name, a value returned elsewhere, or ``return`` put back in front of a
final call); ``drop_return`` takes one away, the bug synthesis injects and the inverse."""

from __future__ import annotations

import libcst as cst

from .context import FunctionContext, Op, Site
from .insertions import (
    FunctionScope,
    ends_in_exit,
    facts_of,
    insert_into,
    own_blocks,
    owner_function,
    statement_pool,
)
from .nodes import int_value, is_str, walk
from .statements import sole_statement, statement_removal

MAX_RETURNS = 3  # returned expressions tried where a function falls off its end

# Calls whose value is the point of calling them: `", ".join(parts)` left as a statement is a
# dropped `return`; `items.append(x)` is not.
_VALUE_CALLS = frozenset({
    "sorted", "len", "sum", "min", "max", "list", "dict", "set", "tuple", "str", "int", "float",
    "round", "abs", "any", "all", "bool", "repr", "format", "join", "strip", "lower", "upper",
    "split", "replace", "get", "copy", "items", "keys", "values", "startswith", "endswith",
})


# Calls made for their effect: `items.append(x)` left as a statement is no dropped `return`.
_EFFECT_CALLS = frozenset({
    "append", "extend", "add", "update", "insert", "remove", "discard", "clear", "sort",
    "reverse", "pop", "popleft", "write", "writelines", "print", "sleep", "setdefault", "put",
    "send", "close", "flush", "debug", "info", "warning", "error", "exception", "critical",
    "log", "acquire", "release", "wait", "notify", "start", "run", "assert_called_once_with",
})


def _valued(expr: cst.BaseExpression, returns_values: bool) -> bool:
    """An expression statement that is plausibly a dropped `return`: computed for its value.

    In a function that returns values elsewhere (`returns_values`), any call not known to be
    made for its effect counts (`_step(node[i], rest)`, `parse_bool(raw)`); elsewhere only
    calls whose value is their whole point (`", ".join(parts)`) and non-call expressions."""
    if is_str(expr) or isinstance(expr, (cst.Ellipsis, cst.Yield, cst.Await, cst.Name)):
        return False
    if int_value(expr) is not None or isinstance(expr, (cst.Float, cst.Integer, cst.Imaginary)):
        return False
    if isinstance(expr, cst.Call):
        f = expr.func
        name = f.value if isinstance(f, cst.Name) else f.attr.value if isinstance(f, cst.Attribute) else ""
        return name in _VALUE_CALLS or (returns_values and bool(name) and name not in _EFFECT_CALLS)
    return True


def _keyword_back(func: FunctionContext, stmt: cst.CSTNode, returns_values: bool) -> Site | None:
    """`parse_bool(raw)` -> `return parse_bool(raw)` in place, for a statement ending a block."""
    small = sole_statement(stmt)
    if not (isinstance(small, cst.Expr) and _valued(small.value, returns_values)):
        return None
    new = stmt.with_changes(body=[cst.Return(value=small.value, semicolon=small.semicolon)])
    return Site(stmt, new, f"`{func.code(small.value)}` -> `return {func.code(small.value)}`")


def _is_generator(func: FunctionContext) -> bool:
    """A `yield` of its own: `return x` would end the iteration, not give a value (an `async
    def` without one returns values like any function)."""
    return any(owner_function(func, n) is func.node for n in func.of_type(cst.Yield))


def _returned(func: FunctionContext) -> list[cst.BaseExpression]:
    """Values the function returns elsewhere (one-liners, None left out), in source order."""
    out, seen = [], set()
    for node in func.of_type(cst.Return):
        value = node.value
        if value is None or (isinstance(value, cst.Name) and value.value == "None"):
            continue
        if owner_function(func, node) is not func.node:
            continue
        text = func.module.code_for_node(value)
        if "\n" not in text and text not in seen:
            seen.add(text)
            out.append(value)
    return out


def _last_assigned(func: FunctionContext, block: cst.CSTNode) -> str | None:
    name = None
    for node in walk(block):
        if isinstance(node, cst.Assign):
            names = [t.target.value for t in node.targets if isinstance(t.target, cst.Name)]
            name = names[-1] if names else name
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            name = node.target.value
    return name if name in func.locals else None


def _return_line(value: cst.BaseExpression) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(body=[cst.Return(value=value)])


class InsertReturn(Op):
    name, family, inverse = "insert_return", "return", "drop_return"
    description = ("add a missing return where a function or an if-branch falls off its end: "
                   "the last assigned name, a value returned elsewhere, or the final expression")

    def sites(self, func):
        fn = func.node
        if fn.name.value == "__init__" or _is_generator(func) or not isinstance(fn.body, cst.IndentedBlock):
            return
        returned = _returned(func)
        pool = statement_pool(func)
        body = fn.body.body
        last = body[-1]
        if not ends_in_exit(fn.body):
            keyword = _keyword_back(func, last, bool(returned))
            if keyword is not None:
                yield keyword
            yield from self._at_end(func, fn.body, last, returned, pool)
        if not returned:
            return  # a procedure: its branches have nothing to return
        for node in func.of_type(cst.If):
            if owner_function(func, node) is not fn:
                continue
            branches = [node.body]
            if isinstance(node.orelse, cst.Else):
                branches.append(node.orelse.body)
            for branch in branches:
                if isinstance(branch, cst.IndentedBlock) and not ends_in_exit(branch):
                    keyword = _keyword_back(func, branch.body[-1], True)
                    if keyword is not None:
                        yield keyword
                    yield from self._at_end(func, branch, branch.body[-1], returned, pool, limit=2)

    def _at_end(self, func, block, last, returned, pool, limit=MAX_RETURNS):
        line = func.prepared.positions[last].end.line
        scope = FunctionScope(func, pool)
        values: list[cst.BaseExpression] = []
        name = _last_assigned(func, block)
        if name is not None:
            values.append(cst.Name(name))
        values += [v for v in returned
                   if scope.exists(facts_of(func.module.code_for_node(v), "eval")[0], line)]
        seen = set()
        for value in values:
            text = func.module.code_for_node(value)
            if text in seen:
                continue
            seen.add(text)
            if len(seen) > limit:
                return
            yield Site(block, insert_into(block, len(block.body), _return_line(value)),
                       f"insert `return {text}`", last, last)


class DropReturn(Op):
    name, family, inverse = "drop_return", "return", "insert_return"
    description = ("drop a return that ends a function or an if-branch, or just its `return` "
                   "keyword: the function falls off its end")

    def sites(self, func):
        fn = func.node
        if not isinstance(fn.body, cst.IndentedBlock):
            return
        # insert_return puts a keyword back only where the function still returns a value.
        valued_returns = sum(1 for r in func.of_type(cst.Return)
                             if r.value is not None and owner_function(func, r) is fn)
        for block in own_blocks(func):
            owner = func.parent(block)
            if not (owner is fn or isinstance(owner, (cst.If, cst.Else))):
                continue
            last = block.body[-1]
            small = sole_statement(last)
            if not isinstance(small, cst.Return) or small.value is None:
                continue
            if isinstance(small.value, cst.Name) and small.value.value == "None":
                continue
            yield statement_removal(block, len(block.body) - 1, f"remove `{func.code(last)}`")
            if _valued(small.value, valued_returns > 1 or owner is not fn):
                new = last.with_changes(body=[cst.Expr(value=small.value, semicolon=small.semicolon)])
                yield Site(last, new, f"`return {func.code(small.value)}` -> `{func.code(small.value)}`")
