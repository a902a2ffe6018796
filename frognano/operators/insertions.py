"""Operators that add a statement to a block: GenProg-style copies of the file's own plain
statements (``insert_statement``, undone by ``remove_statement``) and of its small ifs
(``insert_if``, undone by ``remove_if``), plus ingredients made up for two common omissions:
the step of a ``while i < n`` loop (at the end of its body or before a ``continue``) and a
constructor parameter never stored (``self.p = p``).  ``returns`` builds on the same places.

Insertion is the expensive direction of a search: almost any statement could go almost
anywhere.  Two limits keep it to a handful of sites per line.  Places: after a statement (before
it, for a return/raise/break/continue or the first statement of a block) and at the start of a
loop's body.  Ingredients: statements of the same file whose names all exist at the place and
at least one of which is read or written next to it (data-flow relevance), best
``MAX_INGREDIENTS`` only (and never a second copy of one of the function's own top-level
statements, nor a literal re-assigned to a bound name: resets, not fixes).  Each site is anchored (``Site.first``) at a statement next to the
gap, so a suspicious line finds the insertions beside it.
"""

from __future__ import annotations

import ast
import builtins
import functools
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from .context import FunctionContext, Op, Site
from .nodes import int_value, walk
from .statements import is_plain_statement, sole_statement, statement_removal

MAX_INGREDIENTS = 2  # statements tried per place: the search validates every one
MAX_IF_INGREDIENTS = 1  # small ifs tried per place
MAX_IF_BODY = 2  # statements in an `if` that travels as one ingredient

_BUILTINS = frozenset(dir(builtins))
_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)


# --------------------------------------------------------------------------------------------
# Where statements can go: blocks of the function itself (not of nested defs)
# --------------------------------------------------------------------------------------------

def owner_function(func: FunctionContext, node: cst.CSTNode) -> cst.CSTNode | None:
    node = func.parent(node)
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Lambda)):
        node = func.parent(node)
    return node


def own_blocks(func: FunctionContext) -> Iterator[cst.IndentedBlock]:
    for block in func.of_type(cst.IndentedBlock):
        if owner_function(func, block) is func.node:
            yield block


def _is_exit(stmt: cst.CSTNode) -> bool:
    return isinstance(sole_statement(stmt), _EXITS)


def _exits(stmt: cst.CSTNode) -> bool:
    """Control never gets past `stmt` (conservative: for loops and try fall through)."""
    if _is_exit(stmt):
        return True
    if isinstance(stmt, cst.If):
        orelse = stmt.orelse
        if orelse is None or not ends_in_exit(stmt.body):
            return False
        return ends_in_exit(orelse.body) if isinstance(orelse, cst.Else) else _exits(orelse)
    if isinstance(stmt, cst.While):
        return (isinstance(stmt.test, cst.Name) and stmt.test.value == "True"
                and not any(isinstance(n, cst.Break) for n in walk(stmt.body)))
    return False


def ends_in_exit(body: cst.BaseSuite) -> bool:
    if isinstance(body, cst.SimpleStatementSuite):
        return isinstance(body.body[-1], _EXITS)
    return bool(body.body) and _exits(body.body[-1])


def insert_into(block: cst.IndentedBlock, index: int, stmt: cst.BaseStatement) -> cst.IndentedBlock:
    """`block` with `stmt` before body[index]; blank lines and comments above body[index]
    stay with it, so the new line sits right under the statement before."""
    return block.with_changes(body=[*block.body[:index], stmt, *block.body[index:]])


@dataclass(frozen=True)
class _Place:
    block: cst.IndentedBlock
    index: int  # the new statement goes before block.body[index] (at the end when == len)
    anchor: cst.CSTNode  # the statement the site is reported at
    line: int  # names first bound on this line or before exist here

    def neighbours(self) -> list[cst.CSTNode]:
        body = self.block.body
        return [s for s in (body[self.index - 1] if self.index else None,
                            body[self.index] if self.index < len(body) else None) if s is not None]


def _places(func: FunctionContext) -> Iterator[_Place]:
    """Each gap between statements, reported at the statement(s) it is most plausibly
    missing from: after a statement, before an exit or a block's first statement, and at the
    start of a loop's body (reported at the loop header)."""
    pos = func.prepared.positions
    for block in own_blocks(func):
        body = block.body
        for i, stmt in enumerate(body):
            line = pos[stmt].start.line
            if i == 0 or _is_exit(stmt):
                yield _Place(block, i, stmt, line - 1)  # what `stmt` binds is not there yet
            if not _is_exit(stmt):
                yield _Place(block, i + 1, stmt, pos[stmt].end.line)
            if isinstance(stmt, (cst.For, cst.While)) and isinstance(stmt.body, cst.IndentedBlock):
                yield _Place(stmt.body, 0, stmt, line)


# --------------------------------------------------------------------------------------------
# Ingredients: the file's own statements, indexed by the names they mention
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Ingredient:
    stmt: cst.SimpleStatementLine | cst.If  # cleaned copy: no comments, no semicolons
    text: str
    loads: frozenset[str]  # plain names it needs bound
    mentions: frozenset[str]  # names and dotted paths (`self.items`) it reads or writes
    function: str | None  # qualified name of the function it comes from (None: synthesised)
    line: int


@functools.lru_cache(maxsize=8192)
def facts_of(text: str, mode: str = "exec") -> tuple[frozenset[str], frozenset[str]]:
    """(names read, names and dotted paths mentioned) of a one-line statement or expression.

    By `ast` on the text: a walk of libcst nodes costs far more, and the same texts recur in
    every search of a file (each location re-parses it)."""
    try:
        tree = ast.parse(text, mode=mode)
    except (SyntaxError, ValueError):
        return frozenset(), frozenset()
    scoped = set()  # comprehension and lambda variables: not names of the function
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            scoped |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Lambda):
            scoped |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    loads, mentions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in scoped:
            mentions.add(node.id)
            if isinstance(node.ctx, ast.Load):
                loads.add(node.id)
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted:
                mentions.add(dotted)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            loads.add(node.target.id)  # `count += 1` reads count too
    return frozenset(loads), frozenset(mentions)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _simple_statements(block: cst.BaseSuite) -> Iterator[cst.SimpleStatementLine | cst.If]:
    """Simple statements of a function body at any depth, and its small ifs (elif branches
    included), statement by statement (expressions are never walked), nested defs and classes
    left out."""
    stack = [block]
    while stack:
        suite = stack.pop()
        if not isinstance(suite, cst.IndentedBlock):
            continue
        for stmt in suite.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                yield stmt
            elif not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                stack.extend(_suites(stmt))
                branch = stmt
                while isinstance(branch, cst.If):
                    if _small_if(branch):
                        yield branch
                    branch = branch.orelse


def _small_if(node: cst.If) -> bool:
    """`if c:` (an elif too) with no else and one or two plain one-line statements."""
    body = node.body
    return (node.orelse is None and isinstance(body, cst.IndentedBlock) and 1 <= len(body.body) <= MAX_IF_BODY
            and all(isinstance(s, cst.SimpleStatementLine) and is_plain_statement(sole_statement(s)) for s in body.body))


def _suites(stmt: cst.BaseCompoundStatement) -> list[cst.BaseSuite]:
    if isinstance(stmt, cst.Match):  # no body of its own: one per `case` (more-itertools has them)
        return [case.body for case in stmt.cases]
    out = [stmt.body]
    orelse = getattr(stmt, "orelse", None)
    while orelse is not None:  # elif chains nest
        out.append(orelse.body)
        orelse = getattr(orelse, "orelse", None)
    out += [h.body for h in getattr(stmt, "handlers", ())]
    finalbody = getattr(stmt, "finalbody", None)
    if finalbody is not None:
        out.append(finalbody.body)
    return out


class _Pool:
    """The file's plain statements (assignments, calls) as ingredients, indexed by the names
    they mention, and its module-level names."""

    def __init__(self, prepared) -> None:
        module = prepared.module
        self.module_names: set[str] = set()
        for stmt in module.body:
            self.module_names |= _bound_at_top(stmt)
        self.by_name: dict[str, list[_Ingredient]] = {}
        self.ifs_by_name: dict[str, list[_Ingredient]] = {}
        seen: set[str] = set()
        for qualname, fn, _ in prepared.function_defs():
            for stmt in _simple_statements(fn.body):
                if isinstance(stmt, cst.If):
                    ing, index = _if_ingredient(module, stmt, qualname, prepared.positions[stmt].start.line), self.ifs_by_name
                elif is_plain_statement(sole_statement(stmt)):
                    ing, index = _ingredient(module, stmt, qualname, prepared.positions[stmt].start.line), self.by_name
                else:
                    continue
                if ing is None or ing.text in seen:
                    continue
                seen.add(ing.text)
                for name in ing.mentions:
                    index.setdefault(name, []).append(ing)


# Pools by source text, not by parse: repair re-parses a file for each suspicious location,
# and the ingredients (plain one-line statements) are the same each time.
_POOLS: dict[str, _Pool] = {}
_POOLS_KEPT = 8
_POOLS_LOCK = threading.Lock()  # the search and synthesis list mutations from several threads


def statement_pool(func: FunctionContext) -> _Pool:
    source = func.prepared.source
    with _POOLS_LOCK:
        pool = _POOLS.pop(source, None)
    if pool is None:
        pool = _Pool(func.prepared)
    with _POOLS_LOCK:
        _POOLS[source] = pool  # most recent last
        while len(_POOLS) > _POOLS_KEPT:
            del _POOLS[next(iter(_POOLS))]
    return pool


def _bound_at_top(stmt: cst.CSTNode) -> set[str]:
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    out = set()
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for t in small.targets:
                    out |= {n.value for n in walk(t.target) if isinstance(n, cst.Name)}
            elif isinstance(small, (cst.AnnAssign, cst.AugAssign)) and isinstance(small.target, cst.Name):
                out.add(small.target.value)
            elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                for alias in small.names:
                    name = alias.asname.name if alias.asname else alias.name
                    out.add(_leftmost(name))
    return out


def _leftmost(node: cst.CSTNode) -> str:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else ""


def _ingredient(module: cst.Module, stmt: cst.SimpleStatementLine, function: str | None,
                line: int) -> _Ingredient | None:
    small = stmt.body[0]
    clean = cst.SimpleStatementLine(body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
    text = module.code_for_node(clean).strip()
    if "\n" in text:
        return None  # continuation lines carry their old indentation: only one-liners travel
    loads, mentions = facts_of(text)
    return _Ingredient(clean, text, loads, mentions, function, line)


def _if_ingredient(module: cst.Module, node: cst.If, function: str | None, line: int) -> _Ingredient | None:
    """A fresh `if` with the test and body of `node` (an elif becomes an if; comments dropped)."""
    body = [cst.SimpleStatementLine(body=[s.body[0].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
            for s in node.body.body]
    fresh = cst.If(test=node.test, body=cst.IndentedBlock(body=body))
    text = module.code_for_node(fresh).strip()
    if text.count("\n") != len(body):
        return None  # a test or statement spanning lines
    loads, mentions = facts_of(text)
    return _Ingredient(fresh, text, loads, mentions, function, line)


class FunctionScope:
    """What exists where in one function, and what each statement mentions; cached per
    statement because a statement borders up to three places."""

    def __init__(self, func: FunctionContext, pool: _Pool) -> None:
        self.func = func
        self.static = pool.module_names | _BUILTINS | ({func.self_name} if func.self_name else set())
        self._mentions: dict[int, frozenset[str]] = {}
        self._texts: dict[int, str] = {}

    def exists(self, names: frozenset[str], line: int) -> bool:
        """All `names` exist at `line`: self, module names, builtins, locals bound by then."""
        local = self.func.locals
        return all(n in self.static or local.get(n, line + 1) <= line for n in names)

    def mentions(self, node: cst.CSTNode | None) -> frozenset[str]:
        """Names a neighbour reads or writes (only the header of a compound statement)."""
        found = self._mentions.get(id(node))
        if found is None:
            code = self.func.module.code_for_node
            if isinstance(node, cst.For):
                found = facts_of(f"{code(node.target)}, {code(node.iter)}", "eval")[1]
            elif isinstance(node, (cst.While, cst.If)):
                found = facts_of(code(node.test), "eval")[1]
            elif isinstance(node, cst.SimpleStatementLine):
                found = facts_of(self.text(node))[1]
            else:
                found = frozenset()
            self._mentions[id(node)] = found
        return found

    def text(self, node: cst.CSTNode) -> str:
        """A simple statement's text, to keep a copy from landing next to itself."""
        if not isinstance(node, cst.SimpleStatementLine):
            return ""
        found = self._texts.get(id(node))
        if found is None:
            found = self._texts[id(node)] = self.func.module.code_for_node(node).strip()
        return found

    def context(self, place: _Place) -> set[str]:
        """Names read or written next to the gap: the neighbours and the block's owner."""
        out = set().union(*(self.mentions(n) for n in [*place.neighbours(), self.func.parent(place.block)]))
        return out - {"self", "cls"}


def _loop_advances(func: FunctionContext, place: _Place) -> list[_Ingredient]:
    """`i += 1` (`i -= 1`) where a `while i < n:` (`while i > 0:`) loop goes round again
    without moving `i`: at the end of a body that never assigns it, or before a `continue`
    that nothing before it in its block assigns it: the missing step of an infinite loop."""
    body = place.block.body
    if place.index == len(body):
        loop, region = func.parent(place.block), None
    elif isinstance(sole_statement(body[place.index]), cst.Continue):
        loop, region = func.parent(place.block), body[: place.index]
        while loop is not None and not isinstance(loop, (cst.While, cst.For, cst.FunctionDef)):
            loop = func.parent(loop)
    else:
        return []
    if not isinstance(loop, cst.While):
        return []
    test = loop.test
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name)
            and len(test.comparisons) == 1 and test.left.value in func.locals):
        return []
    name = test.left.value
    op = test.comparisons[0].operator
    if isinstance(op, (cst.LessThan, cst.LessThanEqual)):
        text = f"{name} += 1"
    elif isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
        text = f"{name} -= 1"
    else:
        return []
    for node in (n for stmt in (region if region is not None else [loop.body]) for n in walk(stmt)):
        target = getattr(node, "target", None)
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [target]
        if any(isinstance(t, cst.Name) and t.value == name for t in targets):
            return []  # the loop already moves it (perhaps wrongly: other operators' business)
    stmt = cst.parse_statement(text + "\n", config=func.module.config_for_parsing)
    return [_Ingredient(stmt, text, frozenset({name}), frozenset({name}), None, 0)]


def _pointless(func: FunctionContext, ing: _Ingredient, place: _Place) -> bool:
    """Copies that are almost never the missing line: a store to a name the function never
    reads, a second copy of one of the function's own top-level statements (`queue =
    deque([start])`), and a literal or empty container re-assigned to a name already bound
    (`i = 0`, `seen = set()`)."""
    loads, top_level = _facts(func)
    if ing.text in top_level:
        return True  # it runs once already; a second copy is a duplicate, not the gap
    small = ing.stmt.body[0] if isinstance(ing.stmt, cst.SimpleStatementLine) else None
    if not isinstance(small, (cst.Assign, cst.AnnAssign)):
        return False
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
    names = [t.value for t in targets if isinstance(t, cst.Name)]
    if not names:
        return False
    if not any(n in loads for n in names):
        return True
    value = small.value
    literal = int_value(value) is not None or isinstance(value, (cst.Float, cst.SimpleString)) or (
        isinstance(value, (cst.List, cst.Dict, cst.Set, cst.Tuple)) and not value.elements) or (
        isinstance(value, cst.Name) and value.value in ("None", "True", "False")) or (
        isinstance(value, cst.Call) and not value.args)  # `set()`, `deque()`
    # `i = 0` again where `i` exists: a reset, not a fix.
    return literal and any(func.locals.get(n, place.line + 1) <= place.line for n in names)


_FACTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _facts(func: FunctionContext) -> tuple[set[str], set[str]]:
    """(names the function reads, text of its top-level simple statements), once per function."""
    found = _FACTS.get(func)
    if found is None:
        body = func.node.body.body if isinstance(func.node.body, cst.IndentedBlock) else ()
        found = _FACTS[func] = (
            {n.value for n in func.of_type(cst.Name) if func.is_load(n)},
            {func.module.code_for_node(s).strip() for s in body if isinstance(s, cst.SimpleStatementLine)})
    return found


def _copies(func: FunctionContext, pool: _Pool, index: dict[str, list[_Ingredient]], limit: int,
            extra=lambda place: []) -> Iterator[Site]:
    """Insertion sites: per place, `extra(place)` ingredients then the best `limit` from `index`."""
    scope = FunctionScope(func, pool)
    for place in _places(func):
        context = scope.context(place)
        near = {scope.text(s) for s in place.neighbours()}
        ranked = []
        for ing in {id(i): i for name in context for i in index.get(name, ())}.values():
            if ing.text in near or not scope.exists(ing.loads, place.line) or _pointless(func, ing, place):
                continue
            # Most shared names first, then the same function, then the nearest.
            distance = abs(ing.line - place.line) if ing.function == func.qualname else 10**6
            ranked.append((-len(ing.mentions & context), distance, ing.line, ing.text, ing))
        ranked.sort(key=lambda r: r[:4])
        for ing in [*extra(place), *(r[-1] for r in ranked[:limit])]:
            if ing.text in near:
                continue
            shown = " ".join(ing.text.split()) if "\n" not in ing.text else _one_line(ing.stmt, func.module)
            yield Site(place.block, insert_into(place.block, place.index, ing.stmt),
                       f"insert `{shown}`", place.anchor, place.anchor)


def _one_line(node: cst.If, module: cst.Module) -> str:
    body = "; ".join(module.code_for_node(s).strip() for s in node.body.body)
    return f"if {module.code_for_node(node.test)}: {body}"


def _stores(func: FunctionContext, place: _Place) -> list[_Ingredient]:
    """`self.p = p` at the end of `__init__` for a parameter `p` that the class reads as
    `self.p` but no method ever assigns: the constructor forgot to keep it."""
    fn, me, info = func.node, func.self_name, func.class_info
    if info is None or me is None or fn.name.value != "__init__" or place.block is not fn.body \
            or place.index != len(fn.body.body):
        return []
    assigned = set()
    for method in info.methods:
        for node in walk(method.body):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else \
                [node.target] if isinstance(node, (cst.AugAssign, cst.AnnAssign)) else []
            assigned |= {t.attr.value for t in targets if isinstance(t, cst.Attribute)}
    params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params)]
    out = []
    for name in params[1:] if params and params[0] == me else params:
        if name in info.data_attrs and name not in assigned:
            text = f"{me}.{name} = {name}"
            stmt = cst.parse_statement(text + "\n", config=func.module.config_for_parsing)
            out.append(_Ingredient(stmt, text, frozenset({me, name}), frozenset({name, f"{me}.{name}"}), None, 0))
    return out


class InsertStatement(Op):
    name, family, inverse = "insert_statement", "statement", "remove_statement"
    description = ("insert a copy of a statement of the same file next to statements that use "
                   "its names; or the missing `i += 1` of a while loop, `self.p = p` of a constructor")

    def sites(self, func):
        pool = statement_pool(func)
        yield from _copies(func, pool, pool.by_name, MAX_INGREDIENTS,
                           lambda place: _loop_advances(func, place) + _stores(func, place))


class InsertIf(Op):
    name, family, inverse = "insert_if", "statement", "remove_if"
    description = ("insert a copy of a small `if` of the same file (no else, one or two plain "
                   "statements), e.g. the final flush after a loop")

    def sites(self, func):
        pool = statement_pool(func)
        if pool.ifs_by_name:
            yield from _copies(func, pool, pool.ifs_by_name, MAX_IF_INGREDIENTS)


class RemoveIf(Op):
    name, family, inverse = "remove_if", "statement", "insert_if"
    description = "remove a small `if` (no else, one or two plain statements) altogether"

    def sites(self, func):
        for block in own_blocks(func):
            for i, stmt in enumerate(block.body):
                if isinstance(stmt, cst.If) and _small_if(stmt):
                    yield statement_removal(block, i, f"remove `{_one_line(stmt, func.module)}`")
