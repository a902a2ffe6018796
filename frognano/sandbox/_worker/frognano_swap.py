"""Swap edited function bodies into live modules, or say why a full re-import is needed.

A warm session (``frognano_session``) imports the project and collects its tests once; each
candidate then runs in a forked child that applies the candidate's edit here, by giving the
live function objects the code compiled from the edited text.  That is exact when the edit
changes nothing but function bodies that no import-time code ran: the module, its classes and
every other object are what a fresh import of the edited text would build.  Anything else, and
``CannotSwap`` names why; the caller then re-imports everything (the ordinary warm run):

* a change outside function bodies (a module constant, a class attribute, a decorator, a
  default value, a signature, an import, a new or removed function);
* a changed function that code run at import or collection time may call (module level, class
  bodies, decorators, defaults, ``pytest_*`` hooks, in any module of the project) — by name, so
  it over-approximates; nested functions may change freely otherwise, since no closure of a
  function that never ran exists yet;
* a function whose live object cannot be found (a decorator that hides it without
  ``__wrapped__``), or whose new code needs other closure cells.

Standard library only: this runs in the project's interpreter.
"""

from __future__ import annotations

import __future__

import ast
import functools
import operator
import os
import types
from dataclasses import dataclass

# Code objects made fresh at each execution, never kept: changing them is always safe.
_TRANSIENT = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
_CO_OPTIMIZED = 0x0001
# The module's ``from __future__`` imports hold for a function compiled on its own too.
_FUTURES = functools.reduce(operator.or_, (getattr(__future__, f).compiler_flag for f in __future__.all_feature_names))


class CannotSwap(Exception):
    """The edit needs a full re-import; ``str()`` says why, for the ``-v`` log."""


@dataclass
class Tracked:
    """A project module as the session imported it."""

    name: str  # its key in sys.modules
    path: str
    text: str
    data: bytes  # ``text`` as the file held it
    filename: str = ""  # the module's __file__: what its code objects name
    tree: ast.Module | None = None
    shape: str | None = None  # ``_shape`` of ``tree``, made before forking
    code: types.CodeType | None = None  # ``text`` compiled
    spans: list[Span] | None = None  # its module- and class-level functions
    lines: list[int] | None = None  # byte offset where each line of ``data`` starts, and its end


@dataclass
class Span:
    """A module- or class-level function of a tracked module, as first imported."""

    qualname: str
    start: int  # first line (of its first decorator)
    body: int  # first line of its body
    end: int  # last line
    classes: list[tuple[str, str]]  # enclosing classes: (name, indentation of their line)
    code: types.CodeType | None = None


def read(path: str) -> tuple[str, bytes] | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data.decode("utf-8", "surrogateescape"), data


def track(modules: dict[str, types.ModuleType], inside: str) -> dict[str, Tracked]:
    """Every imported module whose source file is under ``inside``, by path."""
    tracked: dict[str, Tracked] = {}
    prefix = os.path.realpath(inside) + os.sep
    for name, module in list(modules.items()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py"):
            continue
        real = os.path.realpath(path)
        if not real.startswith(prefix) or real in tracked:
            continue
        found = read(real)
        if found is None:
            continue
        tracked[real] = Tracked(name, real, found[0], found[1], filename=path)
    return tracked


# -- the plan -------------------------------------------------------------------------------------

def prepare(tracked: dict[str, Tracked]) -> set[str]:
    """Parse and compile every tracked module once (in the session, before any fork) and
    return the names that import or collection time may reach (``plan``'s ``import_time``)."""
    for item in tracked.values():
        try:
            tree = _tree(item)
            item.code = compile(tree, item.filename, "exec", dont_inherit=True)
            item.shape = _shape(tree)
        except (SyntaxError, ValueError):
            item.shape = item.code = None
            continue
        lines = item.text.splitlines()
        item.spans = list(_spans(tree.body, lines, [], ""))
        item.lines = [0, *(i + 1 for i, byte in enumerate(item.data) if byte == 10)]
        if item.lines[-1] != len(item.data):
            item.lines.append(len(item.data))
        codes = dict((q, c) for q, c, _ in _functions(item.code, item.code))
        for span in item.spans:
            span.code = codes.get(span.qualname)
    names = _import_time_names(tracked)
    for item in tracked.values():
        item.tree = None  # parsed again only for an edit the fast path cannot take: a smaller
        # session forks faster (page tables), and a 5,000-line test module's tree is big
    return names


def _spans(body: list[ast.stmt], lines: list[str], classes: list[tuple[str, str]], prefix: str):  # noqa: ANN202
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            yield Span(prefix + node.name, start, node.body[0].lineno, node.end_lineno or node.lineno, list(classes))
        elif isinstance(node, ast.ClassDef):
            line = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
            indent = line[: len(line) - len(line.lstrip())]
            yield from _spans(node.body, lines, [*classes, (node.name, indent)], prefix + node.name + ".")


def plan(tracked: dict[str, Tracked], modules: dict[str, types.ModuleType],
         import_time: set[str]) -> list[tuple[types.FunctionType, types.CodeType]]:
    """The code swaps that make the live modules what the files on disk now say.

    Raises ``CannotSwap`` when that takes more than swapping code objects.
    """
    changed: list[tuple[Tracked, bytes]] = []
    for item in tracked.values():
        # Every file is read, not trusted by its size and time: a same-size edit within one
        # tick of the file system's clock keeps both (an operator flip, written right after the
        # session read the file).
        try:
            with open(item.path, "rb") as fh:
                data = fh.read()
        except OSError:
            raise CannotSwap(f"{item.name} was removed or cannot be read") from None
        if data != item.data:
            changed.append((item, data))
    swaps: list[tuple[types.FunctionType, types.CodeType]] = []
    for item, text in changed:
        swaps += _module_swaps(item, text, modules.get(item.name), import_time)
    return swaps


def apply(swaps: list[tuple[types.FunctionType, types.CodeType]]) -> None:
    for function, code in swaps:
        function.__code__ = code


def _module_swaps(item: Tracked, data: bytes, module: types.ModuleType | None,
                  import_time: set[str]) -> list[tuple[types.FunctionType, types.CodeType]]:
    if module is None:
        raise CannotSwap(f"{item.name} is no longer imported")
    fast = _one_body_swaps(item, data, module, import_time)
    if fast is not None:
        return fast
    text = data.decode("utf-8", "surrogateescape")
    old_tree = _tree(item)
    try:
        new_tree = ast.parse(text, item.path)
        new_code = compile(new_tree, item.filename or item.path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise CannotSwap(f"{item.name} does not compile: {exc}") from None
    if (item.shape or _shape(old_tree)) != _shape(new_tree):
        raise CannotSwap(f"{item.name}: the edit changes code outside function bodies")
    old_code = item.code or compile(old_tree, item.filename or item.path, "exec", dont_inherit=True)
    swaps = []
    for qualname, old, new in _functions(old_code, new_code):
        if old == new:
            continue
        moved = _strip_positions(old) == _strip_positions(new)  # only its lines moved: same behaviour
        if not moved and qualname.rsplit(".", 1)[-1] in import_time:
            raise CannotSwap(f"{item.name}.{qualname} may run at import or collection time")
        live = _find(module, qualname, old)
        if live is None:
            raise CannotSwap(f"cannot find the live function {item.name}.{qualname}")
        if len(new.co_freevars) != len(live.__closure__ or ()) or new.co_freevars != old.co_freevars:
            raise CannotSwap(f"{item.name}.{qualname} needs other closure cells")
        swaps.append((live, new))
    return swaps


def _one_body_swaps(item: Tracked, data: bytes, module: types.ModuleType,
                    import_time: set[str]) -> list[tuple[types.FunctionType, types.CodeType]] | None:
    """The common edit, fast: one changed run of lines inside one function's body.  Only that
    function is compiled (in a shell of its classes, so names mangle as in the module); the
    functions below it move by the lines the edit added.  None: not such an edit.

    Works on bytes with C-speed comparisons: the edited module may have thousands of lines, and
    this runs once per candidate."""
    if item.spans is None or item.lines is None:
        return None
    old = item.data
    head = _common(old, data, min(len(old), len(data)))
    tail = _common(old, data, min(len(old), len(data)) - head, backwards=True)
    first = old.count(b"\n", 0, head) + 1  # changed lines of the old text, 1-based
    last = max(first, old.count(b"\n", 0, max(len(old) - tail - 1, 0)) + 1)
    inside = [s for s in item.spans if s.body <= first and last <= s.end and s.code is not None]
    if not inside:
        return None
    span = max(inside, key=lambda s: s.body)  # the innermost (a method, not its class)
    delta = data.count(b"\n") - old.count(b"\n")
    if span.end >= len(item.lines):
        return None
    start, end = item.lines[span.start - 1], item.lines[span.end] + len(data) - len(old)
    shell = "".join(f"{indent}class {name}:\n" for name, indent in span.classes)
    padding = "\n" * (span.start - 1 - len(span.classes))  # so the code names the file's lines
    try:
        snippet = ast.parse(padding + shell + data[start:end].decode("utf-8", "surrogateescape"), item.path)
        code: types.CodeType | None = compile(snippet, item.filename or item.path, "exec", dont_inherit=True,
                                              flags=(item.code.co_flags if item.code else 0) & _FUTURES)
    except (SyntaxError, ValueError):
        return None
    if not _only_the_def(snippet, len(span.classes)):
        # The edit also added a statement beside the function (a ``raise`` or an assignment
        # inserted after it): module-level code that only a re-import runs.
        return None
    if len([c for c in code.co_consts if isinstance(c, types.CodeType)]) != 1:
        return None
    for name in span.qualname.split("."):
        code = next((c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == name), None)
        if code is None:
            return None
    if span.qualname.rsplit(".", 1)[-1] in import_time:
        raise CannotSwap(f"{item.name}.{span.qualname} may run at import or collection time")
    live = _find(module, span.qualname, span.code)
    if live is None:
        raise CannotSwap(f"cannot find the live function {item.name}.{span.qualname}")
    if code.co_freevars != live.__code__.co_freevars:
        raise CannotSwap(f"{item.name}.{span.qualname} needs other closure cells")
    swaps = [(live, code)]
    if delta:
        for below in item.spans:
            if below.start > span.end and below.code is not None:
                moved = _find(module, below.qualname, below.code)
                if moved is None:
                    raise CannotSwap(f"cannot find the live function {item.name}.{below.qualname}")
                swaps.append((moved, _shifted(moved.__code__, delta)))
    return swaps


def _only_the_def(tree: ast.Module, shells: int) -> bool:
    """Whether ``tree`` (a function's text in a shell of its classes) holds nothing but that
    one function: one statement at each level, the innermost a def."""
    body: list[ast.stmt] = tree.body
    for _ in range(shells):
        if len(body) != 1 or not isinstance(body[0], ast.ClassDef):
            return False
        body = body[0].body
    return len(body) == 1 and isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef))


def _common(a: bytes, b: bytes, limit: int, backwards: bool = False) -> int:
    """The length of the longest common prefix (or suffix) of ``a`` and ``b``, at most
    ``limit``: page-sized slices first (memcmp), then bytes within the first that differs."""
    limit = min(limit, len(a), len(b))
    la, lb, step, i = len(a), len(b), 4096, 0
    if backwards:
        while i < limit and a[max(la - i - step, la - limit):la - i] == b[max(lb - i - step, lb - limit):lb - i]:
            i += step
        i = min(i, limit)
        while i < limit and a[la - i - 1] == b[lb - i - 1]:
            i += 1
        return i
    while i < limit and a[i:i + step] == b[i:i + step]:
        i += step
    i = min(i, limit)
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def _shifted(code: types.CodeType, delta: int) -> types.CodeType:
    """``code`` as if it stood ``delta`` lines lower (nested code objects too)."""
    consts = tuple(_shifted(c, delta) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_firstlineno=code.co_firstlineno + delta, co_consts=consts)


def _tree(item: Tracked) -> ast.Module:
    if item.tree is None:
        item.tree = ast.parse(item.text, item.path)
    return item.tree


def _shape(tree: ast.Module) -> str:
    """The module with function bodies emptied, positions dropped: what a swap must not change.
    (Bodies are taken out and put back in place: copying a big tree costs more than this.)"""
    saved = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            saved.append((node, node.body))
    for node, _ in saved:
        node.body = []
    try:
        return ast.dump(tree, include_attributes=False)
    finally:
        for node, body in saved:
            node.body = body


def _functions(old: types.CodeType, new: types.CodeType, prefix: str = ""):  # noqa: ANN202
    """(qualname, old code, new code) of every function defined at module or class level,
    paired by position (the shapes are equal, so the order is)."""
    old_codes = [c for c in old.co_consts if isinstance(c, types.CodeType)]
    new_codes = [c for c in new.co_consts if isinstance(c, types.CodeType)]
    if [c.co_name for c in old_codes] != [c.co_name for c in new_codes]:
        raise CannotSwap("the edit changes which functions are defined")
    for o, n in zip(old_codes, new_codes):
        if o.co_name in _TRANSIENT or o.co_name == "<lambda>":
            if _strip_positions(o) != _strip_positions(n):  # module- or class-level: ran at import
                raise CannotSwap(f"{prefix}{o.co_name} is module-level code")
            continue
        qualname = prefix + o.co_name
        if not o.co_flags & _CO_OPTIMIZED:  # a class body (functions have fast locals)
            yield from _functions(o, n, qualname + ".")
        else:
            yield qualname, o, n


def _strip_positions(code: types.CodeType) -> tuple:
    """What a code object does, not where it stands (an edit above it moves its lines)."""
    consts = tuple(_strip_positions(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_argcount


def _find(module: types.ModuleType, qualname: str, old: types.CodeType) -> types.FunctionType | None:
    """The live function compiled from ``old``: by its qualified name, through classes,
    staticmethod/classmethod/property/cached_property wrappers and ``__wrapped__`` chains."""
    parts = qualname.split(".")
    owner: object = module
    for name in parts[:-1]:
        owner = vars(owner).get(name) if hasattr(owner, "__dict__") else None
        if not isinstance(owner, type):
            return None
    value = vars(owner).get(parts[-1])
    for candidate in _unwrap(value):
        code = getattr(candidate, "__code__", None)
        if isinstance(candidate, types.FunctionType) and code is not None and _same(code, old):
            return candidate
    return None


def _unwrap(value: object):  # noqa: ANN202
    seen = 0
    stack = [value]
    while stack and seen < 20:
        value = stack.pop()
        seen += 1
        if value is None:
            continue
        yield value
        for attr in ("__func__", "fget", "fset", "fdel", "func", "__wrapped__"):
            inner = getattr(value, attr, None)
            if inner is not None and inner is not value:
                stack.append(inner)


def _same(live: types.CodeType, old: types.CodeType) -> bool:
    return live.co_name == old.co_name and live.co_firstlineno == old.co_firstlineno and \
        _strip_positions(live) == _strip_positions(old)


# -- what runs at import or collection time ---------------------------------------------------------

class _Names(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:  # noqa: N802
        self.names.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:  # noqa: N802
        self.names.add(node.attr)
        self.generic_visit(node)


def _names_in(nodes: list[ast.AST]) -> set[str]:
    finder = _Names()
    for node in nodes:
        finder.visit(node)
    return finder.names


def _names_outside_bodies(tree: ast.Module) -> set[str]:
    """Names used by module-level code, class bodies, decorators, defaults and annotations."""
    saved = [(node, node.body) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node, _ in saved:
        node.body = []
    try:
        return _names_in([tree])
    finally:
        for node, body in saved:
            node.body = body


def _import_time_names(tracked: dict[str, Tracked]) -> set[str]:
    """Every name that code run at import or collection time may reach, over all modules.

    The roots are module-level statements, class bodies, decorators and defaults, and the
    bodies of ``pytest_*`` hooks; a function whose name a root uses counts, and so on.
    """
    bodies: dict[str, list[set[str]]] = {}
    reached: set[str] = set()
    for item in tracked.values():
        try:
            tree = _tree(item)
        except SyntaxError:
            continue
        reached |= _names_outside_bodies(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = _names_in(node.body)
                bodies.setdefault(node.name, []).append(names)
                if node.name.startswith("pytest_"):
                    reached |= names | {node.name}
            elif isinstance(node, ast.ClassDef):  # making an instance may run any method
                methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                bodies.setdefault(node.name, []).append(methods)
    todo = list(reached)
    while todo:
        name = todo.pop()
        for names in bodies.get(name, ()):
            for new in names - reached:
                reached.add(new)
                todo.append(new)
    return reached
