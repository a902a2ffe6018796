"""The package's shape, checked from its source: no import circles, no import that runs up the
layers of ``docs/ARCHITECTURE.md``, no module taking another module's private names.

Everything is read with ``ast``; nothing of FrogNano is imported, so a circle that only bites at
run time (a lazy import inside a function) is still seen.  Every import counts, at any depth:
a circle closed by a function-level import is still a circle, it only fails later; one closed
by an import under ``if TYPE_CHECKING:`` is the same knot, hidden from the interpreter only.
Relative imports are resolved, ``from pkg import submodule`` is an arrow to the submodule, and
the sandbox's worker scripts' bare imports of each other (``import frognano_confine``) are
arrows between the files beside each other.

The checker is plain functions over ``{module name: source}``, so the self-tests at the end
plant each kind of fault in synthetic source and prove the check can fail.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "frognano"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


@dataclass(frozen=True)
class Import:
    """One import statement's arrow from ``source`` to ``target`` (both dotted module names)."""

    source: str
    target: str
    line: int
    name: str | None  # the name taken by ``from target import name``; None for a whole module


@dataclass(frozen=True)
class Module:
    name: str  # "frognano.runtime.base"; a package is its __init__: "frognano.runtime"
    path: str  # for messages
    text: str
    is_package: bool


def read_modules(root: Path = ROOT / PACKAGE) -> dict[str, Module]:
    """Every ``.py`` file under ``root`` by dotted module name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, str(path.relative_to(root.parent)), path.read_text(), is_package)
    return modules


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative levels counted from the package)."""
    if not node.level:
        return node.module or ""
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _sibling(module: Module, name: str, modules: dict[str, Module]) -> str | None:
    """A bare import of a worker file beside ``module``.  The sandbox's worker scripts run in the
    project's interpreter with their own folder on ``sys.path``, so ``import frognano_paths``
    there means the file next door; they are named ``frognano_*`` so that no other bare name
    (``gguf``, ``torch``: third-party libraries) can be mistaken for one."""
    candidate = module.name.rsplit(".", 1)[0] + "." + name
    return candidate if name.startswith(PACKAGE + "_") and candidate in modules else None


def imports_of(module: Module, modules: dict[str, Module]) -> list[Import]:
    """The arrows out of ``module`` into the package, from every import at any depth.

    ``from pkg import sub`` is an arrow to the submodule ``pkg.sub`` when there is one, else to
    ``pkg`` itself."""
    found = []
    for node in ast.walk(ast.parse(module.text, module.path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name if alias.name in modules else _sibling(module, alias.name, modules)
                if target:
                    found.append(Import(module.name, target, node.lineno, None))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target not in modules:
                target = _sibling(module, target, modules) or target
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    found.append(Import(module.name, sub, node.lineno, None))
                elif target in modules:
                    found.append(Import(module.name, target, node.lineno, alias.name))
    return [i for i in found if i.target != i.source]


def all_imports(modules: dict[str, Module]) -> list[Import]:
    return [i for m in modules.values() for i in imports_of(m, modules)]


# -- (a) circles ------------------------------------------------------------------------------


def circles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative so a deep
    chain cannot exhaust the recursion limit)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for i in imports:
        edges[i.source].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe_circle(component: list[str], imports: list[Import], modules: dict[str, Module]) -> str:
    """A circle as the imports that close it, each with its file and line."""
    members = set(component)
    lines = [f"import circle among {', '.join(component)}:"]
    arrows = {(i.source, i.line, i.target) for i in imports if i.source in members and i.target in members}
    for source, line, target in sorted(arrows):
        lines.append(f"  {modules[source].path}:{line} imports {target}")
    return "\n".join(lines)


# -- (b) layers -------------------------------------------------------------------------------


def read_layers(markdown: str) -> list[list[str]]:
    """The fenced ``layers`` block: one line per layer, the highest first."""
    match = re.search(r"^```layers[ \t]*\n(.*?)^```", markdown, re.S | re.M)
    if not match:
        raise ValueError("no ```layers block")
    return [line.split() for line in match.group(1).splitlines() if line.split()]


def top_of(module: str) -> str:
    """The name under ``frognano/`` that a module belongs to: its package or top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def _line_of(name: str, layers: list[list[str]]) -> str:
    number = next(n for n, line in enumerate(layers) if name in line)
    return f"line {number + 1} of the layers block, {' '.join(layers[number])!r}"


def layer_faults(imports: list[Import], modules: dict[str, Module], layers: list[list[str]]) -> list[str]:
    """Imports that reach a package on the same line or a higher one; modules no line names, and
    names of the block that name nothing (a stale map).

    ``frognano/__init__.py`` counts as the lowest layer."""
    rank = {name: len(layers) - number for number, line in enumerate(layers) for name in line}
    rank[PACKAGE] = 0
    tops = {top_of(name) for name in modules}
    faults = [f"docs/ARCHITECTURE.md names {name!r} ({_line_of(name, layers)}), but frognano/ holds no "
              "such package or module" for name in sorted(set(rank) - tops - {PACKAGE})]
    for name in sorted(modules):
        if top_of(name) not in rank:
            faults.append(f"{modules[name].path}: frognano/{top_of(name)} is on no line of the "
                          "layers block of docs/ARCHITECTURE.md: add it to the line it belongs on")
    for i in imports:
        source, target = top_of(i.source), top_of(i.target)
        if source == target or source not in rank or target not in rank or rank[target] < rank[source]:
            continue
        where = (f"the same line as {source!r} ({_line_of(source, layers)})" if rank[target] == rank[source]
                 else f"{_line_of(target, layers)}, above {source!r} on {_line_of(source, layers)}")
        faults.append(
            f"{modules[i.source].path}:{i.line} imports {i.target}: docs/ARCHITECTURE.md puts "
            f"{target!r} on {where}; a module may import only from its own package and from the "
            "lines below its own")
    return faults


# -- (c) private names ------------------------------------------------------------------------


def private_faults(imports: list[Import], modules: dict[str, Module]) -> list[str]:
    """``from other import _name`` across modules (dunders such as ``__version__`` are public)."""
    return [
        f"{modules[i.source].path}:{i.line} takes the private name {i.name} from {i.target}: "
        "make it public there, or move it to the module that uses it"
        for i in imports
        if i.name and i.name.startswith("_") and not (i.name.startswith("__") and i.name.endswith("__"))
    ]


# -- the package itself -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def package() -> tuple[dict[str, Module], list[Import]]:
    modules = read_modules()
    return modules, all_imports(modules)


def test_no_import_circles(package):
    modules, imports = package
    found = [describe_circle(c, imports, modules) for c in circles(imports)]
    assert not found, "\n".join(found)


def test_imports_run_down_the_layers(package):
    modules, imports = package
    faults = layer_faults(imports, modules, read_layers(ARCHITECTURE.read_text()))
    assert not faults, "\n".join(faults)


def test_no_private_names_across_modules(package):
    modules, imports = package
    faults = private_faults(imports, modules)
    assert not faults, "\n".join(faults)


# -- the checker, proven able to fail ---------------------------------------------------------

LAYERS = "# Layers\n\n```layers\ncli\nrepair\nsandbox runtime\nconfig\n```\n"


def synthetic(files: dict[str, str]) -> tuple[dict[str, Module], list[Import]]:
    """Modules from ``{"frognano/a/b.py": source}``, as ``read_modules`` would give them."""
    modules = {}
    for path, text in files.items():
        parts = Path(path).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, text, is_package)
    return modules, all_imports(modules)


def test_checker_finds_a_circle_closed_by_a_lazy_import():
    modules, imports = synthetic({
        "frognano/__init__.py": "",
        "frognano/runtime/__init__.py": "",
        "frognano/runtime/base.py": "def load():\n    from .mlx import M\n",
        "frognano/runtime/mlx.py": "from frognano.runtime import base\n",
        "frognano/runtime/tiny.py": "from . import base\n",
    })
    found = circles(imports)
    assert found == [["frognano.runtime.base", "frognano.runtime.mlx"]]
    message = describe_circle(found[0], imports, modules)
    assert "frognano/runtime/base.py:2 imports frognano.runtime.mlx" in message
    assert "frognano/runtime/mlx.py:1 imports frognano.runtime.base" in message


def test_checker_finds_an_import_up_the_layers():
    modules, imports = synthetic({
        "frognano/__init__.py": "",
        "frognano/config.py": "import os\n\n\ndef check():\n    from .sandbox.runner import probe\n",
        "frognano/sandbox/__init__.py": "",
        "frognano/sandbox/runner.py": "from ..config import X\nfrom ..runtime import base\n",
        "frognano/runtime/base.py": "from frognano import config\n",
        "frognano/repair/verify.py": "from frognano.sandbox.runner import run\n",
        "frognano/watch.py": "",
    })
    faults = layer_faults(imports, modules, read_layers(LAYERS))
    assert len(faults) == 4, faults
    assert faults[0].startswith("docs/ARCHITECTURE.md names 'cli' (line 1 of the layers block, 'cli'), but")
    assert faults[1].startswith("frognano/watch.py: frognano/watch is on no line")
    assert faults[2].startswith(
        "frognano/config.py:5 imports frognano.sandbox.runner: docs/ARCHITECTURE.md puts 'sandbox' on line 3 "
        "of the layers block, 'sandbox runtime', above 'config' on line 4 of the layers block, 'config'; "
        "a module may import only from its own package and from the lines below its own")
    assert faults[3].startswith(
        "frognano/sandbox/runner.py:2 imports frognano.runtime.base: docs/ARCHITECTURE.md puts 'runtime' on the "
        "same line as 'sandbox' (line 3 of the layers block, 'sandbox runtime')")


def test_checker_finds_a_private_name_taken_across_modules():
    modules, imports = synthetic({
        "frognano/__init__.py": "__version__ = '0'\n",
        "frognano/operators/__init__.py": "from .context import _Op, Context\nfrom frognano import __version__\n",
        "frognano/operators/context.py": "class _Op: ...\n",
        "frognano/sandbox/_worker/__init__.py": "",
        "frognano/sandbox/_worker/frognano_session.py": "from frognano_worker import _size\nimport gguf\n",
        "frognano/sandbox/_worker/frognano_worker.py": "def _size(): ...\n",
        "frognano/sandbox/_worker/gguf.py": "def _size(): ...\n",
    })
    faults = private_faults(imports, modules)
    assert [f.split(" takes")[0] for f in faults] == [
        "frognano/operators/__init__.py:1", "frognano/sandbox/_worker/frognano_session.py:1"]
    assert "the private name _Op from frognano.operators.context" in faults[0]


def test_layers_are_read_from_the_fenced_block():
    assert read_layers(LAYERS) == [["cli"], ["repair"], ["sandbox", "runtime"], ["config"]]
    with pytest.raises(ValueError):
        read_layers("# no block here\n")
