"""The shapes of the developers' fixes in the historical corpus: which repair operators they need.

What it measures
    For each task of the corpus (``benchmarks/history/corpus``, see ``run.py``) every source file
    the reference diff changes is parsed twice, from ``project/`` (buggy) and ``fixed/``, and the
    two module ASTs are compared (no tests run).  Statement lists are aligned (functions and
    classes by name, other statements by their AST, then by textual similarity), and each
    difference becomes one *edit* with a shape:

    operator changed         ``<`` -> ``<=``, ``+`` -> ``-``, ``and`` -> ``or``, ``not`` dropped
    literal changed          a number, string, True/None constant
    name replaced            one variable name for another
    callee replaced          the function or method called (``f(x)`` -> ``g(x)``)
    attribute/key replaced   ``x.a`` -> ``x.b``, ``d["a"]`` -> ``d["b"]``, ``x`` -> ``x.a``
    condition widened        ``c`` -> ``c or d`` (or a clause of an ``and`` dropped)
    condition narrowed       ``c`` -> ``c and d`` (or a clause of an ``or`` dropped)
    condition negated        ``c`` -> ``not c`` and back
    guard added              a new ``if`` whose body ends in return / raise / continue / break
    statement wrapped        an old statement moved into a new ``if`` / ``with`` / loop (and
                             ``statement unwrapped``, back)
    try/except added         an old statement moved into a new ``try``, or a new ``try``
    except clause changed    a handler's exception type, a handler added or removed
    if-block added           a new ``if`` that is no guard (``if c: x = f(x)``)
    statement added          any other new statement
    statement removed        a statement dropped
    argument added/dropped   a call's positional or keyword arguments, or a def's parameters
    call wrapped             ``x`` -> ``str(x)``, ``x.upper()`` (and ``call unwrapped``, back)
    element added/removed    an entry of a list, tuple, set or dict display
    condition changed        a condition replaced by one of another kind (``x is None`` ->
                             ``not x``), neither widened nor narrowed
    expression replaced      a small expression of another kind (at most 10 nodes each side)
    function added/removed   a whole def or class
    import changed           imports (not counted for *alone* and the edit count); type
                             annotations are ignored altogether
    rewrite                  a bigger replacement, or a patch of more than 4 edits (then its
                             only shape; its edits stay in the JSON rows)

    Printed: per shape, the patches that have it, the patches where it is the only shape
    (*alone*), and those among patches of at most 2 edits (what a single/pair search could
    reach); then per project, the share of 1-edit, <=2-edit and rewrite patches.

    .venv/bin/python benchmarks/history/shapes.py
    .venv/bin/python benchmarks/history/shapes.py --projects attrs -v --json shapes.json
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import statistics
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from run import CORPUS, Task, corpus_or_exit, diff_files, groups, load_tasks, pct, read_text, split_list

import _table  # noqa: E402  (benchmarks/_table.py; run.py put benchmarks/ on sys.path)

OP, LIT, NAME, CALLEE, ATTR = ("operator changed", "literal changed", "name replaced", "callee replaced",
                               "attribute/key replaced")
WIDEN, NARROW, NEGATE = "condition widened", "condition narrowed", "condition negated"
GUARD, WRAPPED, TRY, EXCEPT = "guard added", "statement wrapped", "try/except added", "except clause changed"
ADDED, REMOVED, ARG = "statement added", "statement removed", "argument added/dropped"
WRAP, UNWRAP, EXPR = "call wrapped", "call unwrapped", "expression replaced"
DEF_ADDED, DEF_REMOVED, IMPORT, REWRITE = "function added", "function removed", "import changed", "rewrite"
IF_ADDED, ELEMENT, CONDITION = "if-block added", "element added/removed", "condition changed"
_IGNORED = frozenset({"annotation", "returns", "type_comment", "type_params"})  # type hints
FORMAT = "no AST change"
MAX_EDITS = 4  # more edits than this: the patch is a rewrite
SMALL = 10  # nodes on each side of an "expression replaced" (contexts like Load not counted)
_OPS = (ast.operator, ast.cmpop, ast.boolop, ast.unaryop)
_BLOCK_FIELDS = ("body", "orelse", "finalbody")
_TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def dump(node: ast.AST | None) -> str:
    return ast.dump(node, include_attributes=False) if node is not None else ""


def size(node: ast.AST) -> int:
    return sum(1 for n in ast.walk(node) if not isinstance(n, ast.expr_context))


def text(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - unparse of an odd node: its dump will do
        return dump(node)


class Shapes:
    """The edits between a buggy and a fixed module, as shape labels."""

    def __init__(self) -> None:
        self.edits: list[str] = []
        self.in_test = 0  # inside a condition (an if's, a while's, an assert's test)

    def add(self, label: str) -> None:
        self.edits.append(label)

    # -- statements ---------------------------------------------------------------------------
    def body(self, a: list[ast.stmt], b: list[ast.stmt]) -> None:
        a, b = _no_docstring(a), _no_docstring(b)
        keys_a, keys_b = [_key(s) for s in a], [_key(s) for s in b]
        matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for x, y in zip(a[i1:i2], b[j1:j2]):
                    self.node(x, y, "stmt")
            elif tag == "delete":
                for s in a[i1:i2]:
                    self.removed(s)
            elif tag == "insert":
                for s in b[j1:j2]:
                    self.added(s)
            else:
                self.block(a[i1:i2], b[j1:j2])

    def block(self, olds: list[ast.stmt], news: list[ast.stmt]) -> None:
        """A run of old statements replaced by a run of new ones: wrappers first (a new ``if`` or
        ``try`` around old statements, or an old one taken away), then pairs by similarity."""
        olds, news = list(olds), list(news)
        for new in list(news):
            inner = _inner(new)
            moved = [o for o in olds if dump(o) in inner]
            if moved and isinstance(new, (ast.If, ast.Try, ast.With, ast.For, ast.While) + _try_star()):
                self.add(TRY if isinstance(new, (ast.Try,) + _try_star()) else WRAPPED)
                news.remove(new)
                for o in moved:
                    olds.remove(o)
        for old in list(olds):
            inner = _inner(old)
            moved = [n for n in news if dump(n) in inner]
            if moved:
                self.add("statement unwrapped")
                olds.remove(old)
                for n in moved:
                    news.remove(n)
        j = 0
        for old in olds:
            best, best_ratio = None, 0.5
            for k in range(j, len(news)):
                ratio = difflib.SequenceMatcher(None, text(old), text(news[k]), autojunk=False).ratio()
                ratio += 0.2 * (type(old) is type(news[k]))
                if ratio > best_ratio:
                    best, best_ratio = k, ratio
            if best is None:
                self.removed(old)
                continue
            for n in news[j:best]:
                self.added(n)
            self.node(old, news[best], "stmt")
            j = best + 1
        for n in news[j:]:
            self.added(n)

    def added(self, s: ast.stmt) -> None:
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            self.add(IMPORT)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.add(DEF_ADDED)
        elif isinstance(s, (ast.Try,) + _try_star()):
            self.add(TRY)
        elif isinstance(s, ast.If) and not s.orelse and isinstance(s.body[-1], _TERMINAL):
            self.add(GUARD)
        elif isinstance(s, ast.If):
            self.add(IF_ADDED)
        else:
            self.add(ADDED)

    def removed(self, s: ast.stmt) -> None:
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            self.add(IMPORT)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.add(DEF_REMOVED)
        else:
            self.add(REMOVED)

    # -- any node -----------------------------------------------------------------------------
    def node(self, a: ast.AST, b: ast.AST, where: str) -> None:
        if dump(a) == dump(b):
            return
        if type(a) is not type(b):
            self.replaced(a, b, where)
            return
        if isinstance(a, (ast.Import, ast.ImportFrom)):
            self.add(IMPORT)
            return
        if isinstance(a, ast.Constant):
            self.add(ATTR if where == "slice" and isinstance(a.value, str) else LIT)
            return
        if isinstance(a, ast.Name):
            self.add(CALLEE if where == "func" else NAME)
            return
        if isinstance(a, ast.Attribute) and a.attr != b.attr:
            self.add(CALLEE if where == "func" else ATTR)
            self.node(a.value, b.value, "value")
            return
        if isinstance(a, ast.Call):
            self.call(a, b)
            return
        if isinstance(a, ast.BoolOp) and len(a.values) != len(b.values) and type(a.op) is type(b.op):
            self.boolop(a, b)
            return
        if isinstance(a, ast.Try) or (_try_star() and isinstance(a, _try_star())):
            self.handlers(a.handlers, b.handlers)
            for name in _BLOCK_FIELDS:
                self.body(getattr(a, name), getattr(b, name))
            return
        if isinstance(a, ast.arguments):
            self.arguments(a, b)
            return
        if isinstance(a, ast.Dict):
            self.sequence([ast.Tuple([k, v]) if k else v for k, v in zip(a.keys, a.values)],
                          [ast.Tuple([k, v]) if k else v for k, v in zip(b.keys, b.values)], "elts")
            return
        for name, x in ast.iter_fields(a):
            if name in _IGNORED:
                continue
            y = getattr(b, name, None)
            if name == "test":
                self.in_test += 1
                try:
                    self.node(x, y, name) if isinstance(x, ast.AST) and isinstance(y, ast.AST) else self.add(EXPR)
                finally:
                    self.in_test -= 1
                continue
            if isinstance(x, list) and (x and isinstance(x[0], ast.stmt) or y and isinstance(y[0], ast.stmt)):
                self.body(x, y)
            elif isinstance(x, list):
                self.sequence(x, y or [], name)
            elif isinstance(x, ast.AST) and isinstance(y, ast.AST):
                self.node(x, y, name)
            elif isinstance(x, ast.AST) or isinstance(y, ast.AST):  # `return` -> `return x`
                self.add(EXPR)
            elif x != y:  # an identifier: a def's, an argument's, an alias's name
                self.add(NAME)

    def sequence(self, a: list, b: list, where: str) -> None:
        """A list of expressions (targets, elements, decorators, keywords): pairwise when the
        lengths agree, else aligned, the surplus added or dropped."""
        if len(a) == len(b):
            for x, y in zip(a, b):
                if isinstance(x, ast.AST) and isinstance(y, ast.AST):
                    self.node(x, y, where)
                elif x != y:
                    self.add(NAME)
            return
        matcher = difflib.SequenceMatcher(None, [dump(x) for x in a], [dump(y) for y in b], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "replace" and i2 - i1 == j2 - j1:
                for x, y in zip(a[i1:i2], b[j1:j2]):
                    self.node(x, y, where)
            elif tag != "equal":
                self.add(ARG if where in ("args", "keywords") else ELEMENT if where == "elts" else EXPR)

    def call(self, a: ast.Call, b: ast.Call) -> None:
        self.node(a.func, b.func, "func")
        if len(a.args) != len(b.args):
            self.add(ARG)
            self.sequence_common(a.args, b.args)
        else:
            for x, y in zip(a.args, b.args):
                self.node(x, y, "args")
        kw_a = {k.arg: k.value for k in a.keywords}
        kw_b = {k.arg: k.value for k in b.keywords}
        if set(kw_a) != set(kw_b):
            self.add(ARG)
        for name in set(kw_a) & set(kw_b):
            self.node(kw_a[name], kw_b[name], "keywords")

    def sequence_common(self, a: list[ast.expr], b: list[ast.expr]) -> None:
        """The arguments both calls keep, aligned (the added or dropped one is counted)."""
        matcher = difflib.SequenceMatcher(None, [dump(x) for x in a], [dump(y) for y in b], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "replace":
                for x, y in zip(a[i1:i2], b[j1:j2]):
                    self.node(x, y, "args")

    def boolop(self, a: ast.BoolOp, b: ast.BoolOp) -> None:
        da, db = [dump(v) for v in a.values], [dump(v) for v in b.values]
        grows = len(db) > len(da)
        if grows and all(d in db for d in da) or not grows and all(d in da for d in db):
            wider = isinstance(a.op, ast.Or) == grows
            self.add(WIDEN if wider else NARROW)
            return
        self.add(REWRITE if max(size(a), size(b)) > 2 * SMALL else EXPR)

    def handlers(self, a: list[ast.ExceptHandler], b: list[ast.ExceptHandler]) -> None:
        if len(a) != len(b):
            self.add(EXCEPT)
            return
        for x, y in zip(a, b):
            if dump(x.type) != dump(y.type) or x.name != y.name:
                self.add(EXCEPT)
            self.body(x.body, y.body)

    def arguments(self, a: ast.arguments, b: ast.arguments) -> None:
        names_a = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        names_b = [x.arg for x in b.posonlyargs + b.args + b.kwonlyargs]
        if names_a != names_b or dump(a.vararg) != dump(b.vararg) or dump(a.kwarg) != dump(b.kwarg):
            self.add(ARG)
            return
        self.sequence(a.defaults, b.defaults, "defaults")
        self.sequence([d for d in a.kw_defaults if d], [d for d in b.kw_defaults if d], "defaults")

    def replaced(self, a: ast.AST, b: ast.AST, where: str) -> None:
        """Nodes of different kinds in the same place."""
        da, db = dump(a), dump(b)
        if isinstance(a, _OPS) and isinstance(b, _OPS):
            self.add(OP)
        elif isinstance(b, ast.Call) and da in _wrapped(b):
            self.add(WRAP)
        elif isinstance(a, ast.Call) and db in _wrapped(a):
            self.add(UNWRAP)
        elif {type(a), type(b)} <= {ast.Constant, ast.JoinedStr}:  # "..." -> f"..."
            self.add(LIT)
        elif isinstance(b, ast.BoolOp) and da in [dump(v) for v in b.values]:
            self.add(WIDEN if isinstance(b.op, ast.Or) else NARROW)
        elif isinstance(a, ast.BoolOp) and db in [dump(v) for v in a.values]:
            self.add(NARROW if isinstance(a.op, ast.Or) else WIDEN)
        elif (isinstance(b, ast.UnaryOp) and isinstance(b.op, ast.Not) and dump(b.operand) == da
              or isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.Not) and dump(a.operand) == db):
            self.add(NEGATE)
        elif (isinstance(b, (ast.Attribute, ast.Subscript)) and dump(b.value) == da
              or isinstance(a, (ast.Attribute, ast.Subscript)) and dump(a.value) == db):
            self.add(ATTR)
        elif {type(a), type(b)} <= {ast.Name, ast.Attribute}:
            self.add(CALLEE if where == "func" else NAME)
        elif isinstance(a, ast.stmt) and isinstance(b, ast.stmt):
            if size(a) + size(b) > 4 * SMALL:
                self.add(REWRITE)
            else:
                self.removed(a)
                self.added(b)
        elif size(a) <= SMALL and size(b) <= SMALL:
            self.add(CONDITION if self.in_test else EXPR)
        else:
            self.add(REWRITE)


def _wrapped(call: ast.Call) -> set[str]:
    """What a call wraps: its positional arguments, and the object of a method call."""
    inner = {dump(x) for x in call.args}
    if isinstance(call.func, ast.Attribute):
        inner.add(dump(call.func.value))
    return inner


def _try_star() -> tuple[type, ...]:
    return (ast.TryStar,) if hasattr(ast, "TryStar") else ()


def _no_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    """A body without its docstring (a changed docstring is no fix)."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _key(s: ast.stmt) -> str:
    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return f"def {s.name}"
    return dump(s)


def _inner(s: ast.stmt) -> set[str]:
    """The dumps of the statements directly inside a compound statement's blocks."""
    blocks = [getattr(s, f, None) or [] for f in _BLOCK_FIELDS]
    blocks += [h.body for h in getattr(s, "handlers", [])]
    return {dump(x) for block in blocks for x in block}


# -- per task -------------------------------------------------------------------------------------

@dataclass
class ShapeRow:
    id: str
    project: str
    files: int = 0
    edits: list[str] = field(default_factory=list)  # one label per edit, imports included
    shapes: list[str] = field(default_factory=list)  # the distinct shapes counted
    note: str = ""

    @property
    def counted(self) -> list[str]:
        """The edits that count (imports do not)."""
        return [e for e in self.edits if e != IMPORT]


def classify(task: Task) -> ShapeRow:
    row = ShapeRow(task.id, task.project)
    files = sorted(f for f in diff_files(task.reference) if f.endswith(".py"))
    row.files = len(files)
    shapes = Shapes()
    for rel in files:
        before, after = read_text(task.root / "project" / rel), read_text(task.root / "fixed" / rel)
        try:
            a, b = ast.parse(before), ast.parse(after)
        except (SyntaxError, ValueError) as exc:
            row.note = f"{rel} does not parse: {exc}"
            shapes.add(REWRITE)
            continue
        shapes.body(a.body, b.body)
    row.edits = shapes.edits
    counted = row.counted
    if not files:
        row.note = "the reference changes no .py file"
    if not counted and not row.edits:
        row.shapes = [FORMAT]
    elif len(counted) > MAX_EDITS:
        row.shapes = [REWRITE]
    else:
        row.shapes = sorted(set(row.edits))
    return row


# -- the tables -----------------------------------------------------------------------------------

def print_tasks(rows: list[ShapeRow]) -> None:
    body = [[r.id, str(len(r.counted)), ", ".join(r.shapes), r.note[:50]] for r in rows]
    _table.print_table("Reference patch shapes per task", ["task", "edits", "shapes", "note"], body,
                       left={0, 2, 3}, width=150)


def print_summary(rows: list[ShapeRow]) -> None:
    n = len(rows)
    have, alone, small = Counter(), Counter(), Counter()
    for r in rows:
        counted_shapes = [s for s in r.shapes if s != IMPORT] or r.shapes
        for s in r.shapes:
            have[s] += 1
            if len(r.counted) <= 2:
                small[s] += 1
        if len(counted_shapes) == 1:
            alone[counted_shapes[0]] += 1
    body = [[s, str(k), pct(k, n), str(alone[s]), str(small[s])] for s, k in have.most_common()]
    _table.print_table(f"Shapes of the developers' fixes ({n} patches; a patch may have several)",
                       ["shape", "patches", "% of patches", "alone", "in <=2-edit patches"], body, left={0})
    body = []
    for name, members in groups(rows):
        m = len(members)
        edits = [len(r.counted) for r in members]
        body.append([name, str(m), pct(sum(e == 1 for e in edits), m), pct(sum(e <= 2 for e in edits), m),
                     pct(sum(r.shapes == [REWRITE] for r in members), m), f"{statistics.median(edits):.0f}"])
    _table.print_table("Patch size per project (edits, imports not counted)",
                       ["project", "patches", "1 edit", "<=2 edits", "rewrite", "median edits"], body, left={0})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="the corpus (default benchmarks/history/corpus)")
    ap.add_argument("--projects", nargs="+", metavar="A,B", help="projects to classify (default: all)")
    ap.add_argument("--tasks", nargs="+", metavar="GLOB", help="task ids to classify (default: all)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the per-task rows here")
    ap.add_argument("-v", "--verbose", action="store_true", help="also a row per task")
    args = ap.parse_args(argv)
    corpus_or_exit(ap, args.corpus)
    tasks = load_tasks(args.corpus, split_list(args.projects), split_list(args.tasks))
    if not tasks:
        ap.error("no task matches")
    rows = [classify(t) for t in tasks]
    if args.verbose:
        print_tasks(rows)
    print_summary(rows)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
