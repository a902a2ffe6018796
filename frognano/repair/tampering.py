"""Does this edit reach into the test runner?

A fix changes what the code does, never how its tests are run or judged.  An edit to the code
under test that newly imports or patches pytest's internals, walks ``sys.modules`` or the
builtins, installs a tracer, or probes the environment pytest sets for a running test
(``PYTEST_CURRENT_TEST``) can make a wrong program pass its tests: forge pytest's reports, or
answer right only while a test watches.  Such an edit is refused before anything runs, with one
line naming what it adds (the edit tool's error, ``Verifier.refuses``).

Only what an edit *adds* counts: the features of the text after it that the text before it did
not have.  A project that already reads ``os.environ`` or imports ``sys`` keeps being fixable.
AST-based, with a cheap textual pre-filter so that the search's thousands of operator
candidates (which add no names) cost a substring scan each.  It is a static check, so it can
be evaded by code built to evade it (``getattr`` with a computed name, ``exec``); the plugin's
run-time check of pytest's reporting (``sandbox/_worker/frognano_plugin.py``) is the second
line, and the README lists the gaps.
"""

from __future__ import annotations

import ast

from .spans import changed_span

# A module whose import, added by a fix to the code under test, reaches the test runner.
_RUNNER_MODULES = ("_pytest", "pytest", "pluggy", "builtins", "__builtin__", "frognano", "frognano_plugin",
                   "frognano_worker", "frognano_runsetup", "frognano_session", "frognano_swap")
# Dotted names (after resolving import aliases) that reach the runner or its view of a test.
_REACHES = (
    "sys.modules", "sys.settrace", "sys.setprofile", "sys.monitoring", "sys.addaudithook", "sys._getframe",
    "sys.meta_path", "sys.path_hooks", "threading.settrace", "threading.setprofile", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "inspect.stack", "inspect.currentframe", "inspect.getouterframes",
    "traceback.extract_stack", "__builtins__", "__import__", "importlib.import_module", "importlib.__import__",
)
_ENVIRON = ("os.environ", "os.environb", "os.getenv", "os.getenvb")
# The textual pre-filter: an edit whose added lines hold none of these adds none of the
# features above (every feature needs one of these words in the text that adds it).
_WORDS = ("pytest", "pluggy", "builtin", "frognano", "modules", "settrace", "setprofile", "monitoring",
          "audithook", "_getframe", "meta_path", "path_hooks", "get_obj", "get_refer", "stack", "frame",
          "__import__", "import_module", "environ", "getenv", "import")


def features(text: str) -> dict[str, int] | None:
    """Each runner-reaching feature of ``text`` with the first line it occurs on; None when the
    text does not parse (the run then fails on its own)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found: dict[str, int] = {}
    aliases: dict[str, str] = {}  # local name -> the dotted name it is bound to by an import

    def add(what: str, node: ast.AST) -> None:
        found.setdefault(what, getattr(node, "lineno", 0))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                if _is_runner_module(a.name):
                    add(f"import {a.name}", node)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            if _is_runner_module(node.module):
                add(f"from {node.module} import ...", node)
    # Docstrings only say things: "used by pytest" in one reaches nothing.
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            low = node.value.lower()
            if "pytest" in low or "frognano" in low or "pluggy" in low:
                add(f"the string {node.value[:40]!r}", node)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            dotted = _dotted(node, aliases)
            if dotted is None:
                continue
            for reach in (*_REACHES, *(f"{m}." for m in _RUNNER_MODULES)):
                if dotted == reach or dotted.startswith(reach + ".") or (reach.endswith(".") and dotted.startswith(reach)):
                    add(reach.rstrip("."), node)
                    break
    for node in _environ_probes(tree, aliases):
        add(f"{_dotted(node, aliases)} used whole or with a computed key", node)
    return found


def _is_runner_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in _RUNNER_MODULES)


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, its first name resolved through import aliases."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _environ_probes(tree: ast.AST, aliases: dict[str, str]) -> list[ast.AST]:
    """Uses of the environment other than reading one literal key (``os.environ["HOME"]``,
    ``os.environ.get("HOME")``, ``os.getenv("HOME")``): a computed key, or the environment
    taken whole (iterated, copied, its items listed), which can probe any name.  A literal key
    naming pytest is caught as a string."""
    def literal(arg: ast.AST | None) -> bool:
        return isinstance(arg, ast.Constant) and isinstance(arg.value, str)

    uses: list[ast.AST] = []
    keyed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and _dotted(node, aliases) in _ENVIRON:
            uses.append(node)
        if isinstance(node, ast.Subscript) and _dotted(node.value, aliases) in _ENVIRON and literal(node.slice):
            keyed.add(id(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            first = node.args[0] if node.args else None
            if _dotted(node.func, aliases) in ("os.getenv", "os.getenvb") and literal(first):
                keyed.add(id(node.func))
            elif isinstance(node.func, ast.Attribute) and (node.func.attr in ("get", "pop", "setdefault") and _dotted(node.func.value, aliases) in _ENVIRON
                  and literal(first)):
                keyed.add(id(node.func.value))
    return [n for n in uses if id(n) not in keyed]


def _added_text(before: str, after: str) -> str:
    old, new = before.splitlines(), after.splitlines()
    head, end, delta = changed_span(old, new)
    return "\n".join(new[head:end + delta])


def reaches(before: str | None, after: str) -> str:
    """Why the edit ``before`` -> ``after`` of a non-test module reaches into the test runner
    (one clause naming what it adds and where), or "" when it does not."""
    before = before or ""
    added = _added_text(before, after)
    if not any(w in added for w in _WORDS) and "PYTEST" not in added.upper():
        return ""  # the common case: an operator candidate, a plain fix
    new = features(after)
    if not new:
        return ""
    old = features(before) or {}
    fresh = [(line, what) for what, line in new.items() if what not in old]
    if not fresh:
        return ""
    fresh.sort()
    line, what = fresh[0]
    more = f" (and {len(fresh) - 1} more)" if len(fresh) > 1 else ""
    return f"it adds {what} at line {line}{more}"


def refusal(path: str, before: str | None, after: str) -> str:
    """The one-line refusal of such an edit of ``path``, or ""."""
    why = reaches(before, after)
    if not why:
        return ""
    return (f"{path}: the edit reaches into the test runner ({why}): a fix changes what the code does, "
            "never how pytest runs or judges its tests")
