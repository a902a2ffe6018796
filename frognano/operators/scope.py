"""Module-wide facts the ingredient operators read: the literals a file holds, the names it
binds, the exception classes it raises, catches, imports or defines, and the arity of its
functions and methods.

Operators see one function at a time, but a plausible replacement often comes from elsewhere in
the file (the `'last'` key used in another function, the `NotFound` error raised further down).
Scanning the module once per parse, not once per function, keeps that affordable: the scan is
cached on the parse object and dropped with it.
"""

from __future__ import annotations

import builtins
import re
import weakref
from collections import Counter
from dataclasses import dataclass, field

import libcst as cst

from .nodes import block_body, decorated
from .parsed import Parsed

# Literal kinds: a replacement keeps the kind (a str key for a str key, never an int).
LiteralKey = tuple[str, object]  # ("str" | "bytes" | "int" | "float", value)

MAX_LITERAL_CHARS = 30  # longer strings are messages and prose, not keys or separators

BUILTIN_NAMES = frozenset(dir(builtins))
# A quoted identifier-like word inside a docstring: "end", 'user_id', "content-type".
_QUOTED_WORD = re.compile(r"(['\"])([A-Za-z_][\w.-]{0,%d})\1" % (MAX_LITERAL_CHARS - 1))
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Warning", "Exit", "Interrupt", "Iteration")


def looks_like_exception(name: str) -> bool:
    return name.endswith(_EXCEPTION_SUFFIXES) or name == "Exception"


def dotted(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a Name/Attribute chain, None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def literal_key(node: cst.CSTNode) -> LiteralKey | None:
    """The kind and value of a plain literal; None for f-strings, long or multi-line strings,
    and anything that is not a literal."""
    try:
        if isinstance(node, cst.SimpleString):
            value = node.evaluated_value
            if len(value) > MAX_LITERAL_CHARS or (isinstance(value, str) and "\n" in value):
                return None
            return ("bytes" if isinstance(value, bytes) else "str", value)
        if isinstance(node, cst.Integer):
            return ("int", int(node.evaluated_value))
        if isinstance(node, cst.Float):
            return ("float", float(node.evaluated_value))
    except (ValueError, SyntaxError, TypeError):
        return None
    return None


def is_docstring_like(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """A bare string statement (docstring or string used as a comment)."""
    return isinstance(parent, cst.Expr) and parent.value is node


@dataclass(frozen=True)
class Arity:
    required: int  # positional parameters without defaults (self excluded)
    total: int  # positional parameters (self excluded); -1 when *args takes any number

    def accepts(self, n: int) -> bool:
        return self.required <= n and (self.total < 0 or n <= self.total)


def arity(fn: cst.FunctionDef, method: bool) -> Arity:
    p = fn.params
    params = [*p.posonly_params, *p.params]
    if method and not decorated(fn, "staticmethod"):
        params = params[1:]
    required = sum(1 for q in params if q.default is None)
    total = -1 if isinstance(p.star_arg, cst.Param) else len(params)
    return Arity(required, total)


@dataclass
class ModuleScope:
    # kind/value -> number of occurrences and the text of the first one, in first-seen order
    literals: dict[LiteralKey, tuple[int, str]] = field(default_factory=dict)
    # Quoted words in docstrings (`{"day": ..., "end": "HH:MM"}`): keys documented, maybe unused
    doc_words: list[str] = field(default_factory=list)
    bound: set[str] = field(default_factory=set)  # module-level names: imports, defs, assignments
    exceptions: Counter[str] = field(default_factory=Counter)  # dotted names, by use count
    functions: dict[str, tuple[Arity, int]] = field(default_factory=dict)  # name -> arity, def line
    methods: dict[str, dict[str, tuple[Arity, int]]] = field(default_factory=dict)  # class -> name -> ...

    def available(self, name: str, local: bool = False) -> bool:
        """Can `name` be called at this point without a NameError?"""
        return local or name in self.bound or name in BUILTIN_NAMES


_CACHE: weakref.WeakKeyDictionary[Parsed, ModuleScope] = weakref.WeakKeyDictionary()


def module_scope(prepared: Parsed) -> ModuleScope:
    found = _CACHE.get(prepared)
    if found is None:
        found = _CACHE[prepared] = _scan(prepared)
    return found


def _scan(prepared: Parsed) -> ModuleScope:
    scope = ModuleScope()
    module = prepared.module
    positions = prepared.positions
    defined_exceptions: list[tuple[str, list[str]]] = []
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            scope.bound.add(stmt.name.value)
        if isinstance(stmt, cst.FunctionDef):
            scope.functions[stmt.name.value] = (arity(stmt, False), positions[stmt].start.line)
        elif isinstance(stmt, cst.ClassDef):
            bases = [d for d in (dotted(a.value) for a in stmt.bases) if d]
            defined_exceptions.append((stmt.name.value, bases))
            scope.methods[stmt.name.value] = {
                fn.name.value: (arity(fn, True), positions[fn].start.line)
                for fn in block_body(stmt.body) if isinstance(fn, cst.FunctionDef)
                and not (decorated(fn, "property") or decorated(fn, "cached_property"))}
    # One pre-order walk with parents for literals, imports, raise/except and assignments.
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None, bool]] = [(module, None, True)]
    while stack:
        node, parent, top = stack.pop()
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            _imports(node, scope, top)
        elif top and isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            scope.bound.update(t.value for t in targets if isinstance(t, cst.Name))
        elif isinstance(node, cst.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, cst.Call) else node.exc
            name = dotted(exc)
            if name:
                scope.exceptions[name] += 1
        elif isinstance(node, cst.ExceptHandler) and node.type is not None:
            types = node.type.elements if isinstance(node.type, cst.Tuple) else [cst.Element(node.type)]
            for el in types:
                name = dotted(el.value)
                if name:
                    scope.exceptions[name] += 1
        elif is_docstring_like(node, parent):
            if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
                text = module.code_for_node(node)
                scope.doc_words.extend(w for _, w in _QUOTED_WORD.findall(text) if w not in scope.doc_words)
        else:
            key = literal_key(node)
            if key is not None:
                count, text = scope.literals.get(key, (0, module.code_for_node(node)))
                scope.literals[key] = (count + 1, text)
        # Top level: statements of the module body (and their small statements) only.
        child_top = top and isinstance(node, (cst.Module, cst.SimpleStatementLine))
        for child in reversed(node.children):
            stack.append((child, node, child_top))
    # Classes deriving from an exception class (here or imported) are exceptions too.
    known = {n for n in (*scope.exceptions, *scope.bound) if looks_like_exception(n.rsplit(".", 1)[-1])}
    known |= {n.rsplit(".", 1)[-1] for n in known}
    changed = True
    while changed:
        changed = False
        for name, bases in defined_exceptions:
            if name not in known and any(looks_like_exception(b) or b.rsplit(".", 1)[-1] in known
                                         for b in bases):
                known.add(name)
                changed = True
    # `raise self.error(...)`, `except errors:`: raised or caught, but not judged classes.
    for name in list(scope.exceptions):
        last = name.rsplit(".", 1)[-1]
        if not (looks_like_exception(last) or last in known):
            del scope.exceptions[name]
    for name in sorted(known):
        if name in scope.bound and name not in scope.exceptions:
            scope.exceptions[name] += 0  # defined or imported, never raised or caught here
    return scope


def _imports(node: cst.Import | cst.ImportFrom, scope: ModuleScope, top: bool) -> None:
    if isinstance(node.names, cst.ImportStar):
        return
    for alias in node.names:
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            name = alias.asname.name.value
        else:
            name = (dotted(alias.name) or "").split(".", 1)[0]
        if not name:
            continue
        if top:  # an import inside a function binds nothing the other functions can use
            scope.bound.add(name)
