"""Operators whose replacement comes from *ingredients*: what the surrounding code already uses.

A wrong dict key (`person['first']` where `'last'` was meant), a confused callee (`ceil` for
`floor`, `.append` for `.extend`) or the wrong exception class (`except KeyError` around an
index) are one-token bugs whose fix is not a small step from the bug, unlike `<` -> `<=`; it is
another token of the same kind the author wrote elsewhere, or a well-known confusable.  So each
operator draws its replacements from the function, then the file (``scope.module_scope``), then a
small table, nearest and most frequent first, with a cap per site to bound the search.

Ingredients come from the file, and for string literals also from the failing tests' output:
the search passes the strings their messages quote (``mutations(..., ingredients=...)``;
``KeyError: 'last'``, ``assert 'Ada' == 'Ada Lovelace'``), offered after the file's own, up to
``MAX_MESSAGE_LITERALS`` more per literal.  Words quoted in the file's docstrings
(`{"start": ..., "end": ...}`) come last among the file's: documented, they are often the one the
buggy line should have used.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection, Iterator

import libcst as cst

from .context import FunctionContext, Op, Site
from .nodes import self_attr
from .scope import (
    BUILTIN_NAMES,
    LiteralKey,
    dotted,
    is_docstring_like,
    literal_key,
    looks_like_exception,
    module_scope,
)

MAX_LITERALS = 4  # replacements per string literal
MAX_NUMBERS = 3  # per number literal (off_by_one already offers n ± 1)
MAX_MESSAGE_LITERALS = 2  # more per string literal, from the failing tests' messages


def _render_literal(key: LiteralKey, text: str, like: cst.BaseExpression) -> str:
    """Source text for the ingredient `key` standing where `like` stands, in like's quoting
    (`'first'` -> `'last'` even when the file spells it `"last"` elsewhere)."""
    kind, value = key
    if kind not in ("str", "bytes") or not isinstance(like, cst.SimpleString):
        return text
    prefix, quote = like.prefix, like.quote
    if "r" in prefix.lower() or len(quote) == 3:
        return text  # raw or triple-quoted site: the ingredient's own spelling is always valid
    r = repr(value)
    if kind == "bytes":
        r = r[1:]
    inner = r[1:-1]
    quotes = ("'", '"') if kind == "str" else (b"'", b'"')
    if r[0] != quote and any(q in value for q in quotes):
        return text  # re-quoting would change escapes: keep the spelling that is known good
    return f"{prefix}{quote}{inner}{quote}"


class SwapLiteral(Op):
    name, family, inverse = "swap_literal", "literal", "swap_literal"
    description = ("replace a str/bytes/int/float literal by another of the same kind from the "
                   "function (nearest first), the file (most frequent first), words quoted "
                   "in its docstrings, then strings the failing tests' messages quote")

    def sites(self, func):
        scope = module_scope(func.prepared)
        positions = func.prepared.positions
        own: list[tuple[cst.CSTNode, LiteralKey]] = []
        for node in func.nodes:
            parent = func.parent(node)
            if isinstance(parent, cst.ConcatenatedString) or is_docstring_like(node, parent):
                continue
            if isinstance(parent, cst.Attribute) and parent.value is node and not isinstance(node, cst.SimpleString):
                continue  # `1 .real`
            key = literal_key(node)
            if key is not None:
                own.append((node, key))
        for node, key in own:
            line = positions[node].start.line
            # Same function first, nearest line first; then the file, most frequent first.
            nearby = sorted(((abs(positions[n].start.line - line), k) for n, k in own
                             if k[0] == key[0] and k != key), key=lambda item: item[0])
            choices = list(dict.fromkeys(k for _, k in nearby))
            in_file = sorted((k for k in scope.literals if k[0] == key[0] and k != key),
                             key=lambda k: -scope.literals[k][0])
            choices += [k for k in in_file if k not in choices]
            if key[0] == "str":  # last: words the docstrings quote, keys documented but unused
                choices += [k for k in (("str", w) for w in scope.doc_words) if k != key and k not in choices]
            cap = MAX_LITERALS if key[0] in ("str", "bytes") else MAX_NUMBERS
            choices = choices[:cap]
            if key[0] == "str":  # beyond the cap: evidence from the run, not a guess from the file
                heard = [("str", w) for w in func.ingredients if ("str", w) != key and ("str", w) not in choices]
                choices += heard[:MAX_MESSAGE_LITERALS]
            for other in choices:
                text = scope.literals[other][1] if other in scope.literals else repr(other[1])
                new_text = _render_literal(other, text, node)
                try:
                    new = cst.parse_expression(new_text)
                except cst.ParserSyntaxError:
                    continue
                new = func.fit(node, new)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


# Confusable callees: each group's members are mistaken for one another.
_CALLEE_GROUPS = [
    ("min", "max"), ("ceil", "floor"), ("floor", "trunc"), ("any", "all"), ("sum", "len"),
    ("int", "round"), ("sorted", "reversed"), ("list", "sorted"), ("str", "repr"),
    ("append", "extend"), ("append", "appendleft"), ("pop", "popleft"), ("keys", "values", "items"),
    ("startswith", "endswith"), ("lower", "upper"), ("isupper", "islower"), ("index", "find"),
    ("find", "rfind"), ("index", "rindex"), ("split", "rsplit"), ("remove", "discard"),
    ("isdigit", "isalpha", "isalnum"), ("strip", "lstrip", "rstrip"), ("ljust", "rjust"),
    ("get", "pop"), ("get", "setdefault"), ("add", "update"), ("union", "intersection"),
    ("intersection", "difference"), ("issubset", "issuperset"), ("search", "match"),
    ("match", "fullmatch"), ("insert", "append"),
    ("deepcopy", "copy"),  # marshmallow 29265fc: a deep copy of what cannot be pickled
]
_CONFUSABLE: dict[str, list[str]] = {}
for _group in _CALLEE_GROUPS:
    for _name in _group:
        _CONFUSABLE.setdefault(_name, []).extend(n for n in _group if n != _name and n not in _CONFUSABLE[_name])
# Callees that take at most this many positional arguments: swapping to them otherwise only
# makes a TypeError, a candidate no test can accept.
_MAX_POSITIONAL = {"len": 1, "reversed": 1, "any": 1, "all": 1, "keys": 0, "values": 0, "items": 0,
                   "lower": 0, "upper": 0, "isupper": 0, "islower": 0, "isdigit": 0, "isalpha": 0,
                   "isalnum": 0, "popleft": 0, "appendleft": 1, "append": 1, "extend": 1,
                   "discard": 1, "remove": 1, "add": 1, "insert": 2, "ceil": 1, "floor": 1,
                   "trunc": 1, "sorted": 1, "list": 1, "str": 1, "repr": 1}
_MIN_POSITIONAL = {"insert": 2, "append": 1, "extend": 1, "add": 1, "remove": 1, "discard": 1,
                   "appendleft": 1, "len": 1, "reversed": 1, "any": 1, "all": 1, "sum": 1,
                   "ceil": 1, "floor": 1, "trunc": 1, "round": 1, "repr": 1}
_NO_KEYWORDS = {"len", "reversed", "any", "all", "ceil", "floor", "trunc", "repr"}
MAX_CALLEES = 4  # replacements per call: the table's first, then same-arity names in scope


def _shape_fits(target: str, call: cst.Call) -> bool:
    positional = sum(1 for a in call.args if a.keyword is None and not a.star)
    if any(a.star for a in call.args):
        return target not in _MAX_POSITIONAL
    if target in _NO_KEYWORDS and any(a.keyword is not None for a in call.args):
        return False
    return _MIN_POSITIONAL.get(target, 0) <= positional <= _MAX_POSITIONAL.get(target, positional)


class SwapCallee(Op):
    name, family, inverse = "swap_callee", "callee", "swap_callee"
    description = ("call a confusable function or method instead (min/max, ceil/floor, "
                   "append/extend, keys/values, ...) or another one in scope taking as many arguments")

    def sites(self, func):
        scope = module_scope(func.prepared)
        me = func.self_name
        cls = func.class_info.node.name.value if func.class_info else None
        own = func.qualname.rsplit(".", 1)[-1]
        for call in func.of_type(cst.Call):
            callee = call.func
            if isinstance(callee, cst.Name):
                name = callee.value
            elif isinstance(callee, cst.Attribute):
                name = callee.attr.value  # any method name may exist on the object
            else:
                continue
            choices = [t for t in _CONFUSABLE.get(name, ()) if _shape_fits(t, call)
                       and (isinstance(callee, cst.Attribute) or scope.available(t, t in func.locals))]
            choices += self._same_arity(func, scope, call, name, own, me, cls)
            for other in list(dict.fromkeys(choices))[:MAX_CALLEES]:
                if isinstance(callee, cst.Name):
                    new_func = callee.with_changes(value=other)
                else:
                    new_func = callee.with_changes(attr=callee.attr.with_changes(value=other))
                yield Site(callee, new_func, f"`{func.code(callee)}` -> `{func.code(new_func)}`")

    @staticmethod
    def _same_arity(func: FunctionContext, scope, call: cst.Call, name: str, own: str,
                    me: str | None, cls: str | None) -> list[str]:
        """Module functions (for `f(...)`) or methods of this class (for `self.f(...)`) that take
        this many positional arguments, nearest definition first."""
        if any(a.keyword is not None or a.star for a in call.args):
            return []
        n = len(call.args)
        if isinstance(call.func, cst.Name) and name in scope.functions and name not in func.locals:
            table = scope.functions
        elif self_attr(call.func, me) and cls is not None and name in scope.methods.get(cls, {}):
            table = scope.methods[cls]
        else:
            return []
        here = table[name][1]
        fits = [(abs(line - here), other) for other, (ar, line) in table.items()
                if other not in (name, own) and not other.startswith("__") and ar.accepts(n)]
        return [other for _, other in sorted(fits)]


# Exceptions mistaken for one another (lookup errors, bad values, arithmetic).
EXCEPTION_CONFUSABLE = {
    "KeyError": ["IndexError", "LookupError", "ValueError", "AttributeError"],
    "IndexError": ["KeyError", "LookupError", "ValueError", "StopIteration"],
    "LookupError": ["KeyError", "IndexError"],
    "ValueError": ["TypeError", "KeyError", "IndexError"],
    "TypeError": ["ValueError", "AttributeError"],
    "AttributeError": ["TypeError", "KeyError"],
    "StopIteration": ["IndexError", "ValueError"],
    "ZeroDivisionError": ["ValueError", "ArithmeticError"],
    "ArithmeticError": ["ZeroDivisionError", "ValueError"],
    "FileNotFoundError": ["OSError", "PermissionError"],
    "OSError": ["FileNotFoundError", "ValueError"],
    "RuntimeError": ["ValueError", "TypeError"],
}
MAX_EXCEPTIONS = 5  # replacements per `except`/`raise` class


def _exception_names(func: FunctionContext) -> Iterator[tuple[cst.BaseExpression, set[str]]]:
    """(class expression, classes beside it in the same `except (A, B)`) for every `except` and
    `raise` in the function."""
    for node in func.nodes:
        if isinstance(node, cst.ExceptHandler) and node.type is not None:
            if isinstance(node.type, cst.Tuple):
                exprs = [el.value for el in node.type.elements]
            else:
                exprs = [node.type]
            names = {dotted(e) for e in exprs}
            for e in exprs:
                if dotted(e):
                    yield e, names - {dotted(e)}
        elif isinstance(node, cst.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, cst.Call) else node.exc
            if dotted(exc):
                yield exc, set()


class SwapException(Op):
    name, family, inverse = "swap_exception", "exception", "swap_exception"
    description = ("change the class in `except X` / `raise X(...)` to another the module raises, "
                   "catches or imports, or a confusable builtin (KeyError/IndexError/ValueError/...)")

    def sites(self, func):
        scope = module_scope(func.prepared)
        for expr, beside in _exception_names(func):
            name = dotted(expr)
            last = name.rsplit(".", 1)[-1]
            if not (looks_like_exception(last) or name in scope.exceptions):
                continue  # `raise self.error(...)`, `except errors:`: not a class we can judge
            module_ones = [n for n, _ in scope.exceptions.most_common()]
            choices = [n for n in [*module_ones, *EXCEPTION_CONFUSABLE.get(last, ())]
                       if n != name and n not in beside and self._available(n, scope, func)]
            for other in list(dict.fromkeys(choices))[:MAX_EXCEPTIONS]:
                try:
                    new = cst.parse_expression(other)
                except cst.ParserSyntaxError:
                    continue
                new = func.fit(expr, new)
                yield Site(expr, new, f"`{name}` -> `{other}`")

    @staticmethod
    def _available(name: str, scope, func: FunctionContext) -> bool:
        head = name.split(".", 1)[0]
        if "." not in name and not looks_like_exception(name) and name not in scope.exceptions:
            return False
        return head in BUILTIN_NAMES or head in scope.bound or head in func.locals


def handler_lines(source: str, lines: Collection[int]) -> set[int]:
    """Lines of the `except X` clauses of every `try` whose body holds one of `lines`.

    A handler that does not match the exception raised in its body runs no line that coverage
    records, so spectrum localisation never ranks it, though its class may be the bug
    (`except TypeError` around `int(text)`); the search reaches swap_exception's sites there
    through the suspicious lines of the body.  Cheap: one `ast` parse per source, no libcst.
    """
    wanted = set(lines)
    found: set[int] = set()
    for first, last, handlers in _try_blocks(source):
        if any(first <= line <= last for line in wanted):
            found.update(handlers)
    return found - wanted


@functools.lru_cache(maxsize=8)
def _try_blocks(source: str) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """Each `try` of ``source``: its body's first and last lines, and its typed handlers' lines.
    Cached: the search asks once per suspicious location, and a parse of a 5,000-line module
    (more-itertools' ``more.py``) costs 90 ms."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    return tuple((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno,
                  tuple(h.type.lineno for h in node.handlers if h.type is not None))
                 for node in ast.walk(tree) if isinstance(node, (ast.Try, ast.TryStar)) and node.body)
