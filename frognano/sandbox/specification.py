"""What defines success: the files and settings no fix may change (docs/ARCHITECTURE.md, invariant 6).

The tests are the specification.  A fix that makes them pass by rewriting them (``assert
is_adult(18) is True`` into ``assert True``) is reward hacking in training and a lie to a user,
so one rule, here, answers "does this change touch the specification?" for every producer and
checker of changes: the harness's ``edit`` and ``apply`` tools, the verifier (whatever produced
the patch: search, a model, a replay), synthesis (an injected bug never lives in a test) and
rewards.

The specification is, conservatively:

* test modules: what ``project_paths.is_test_code`` calls test code under the project's
  ``python_files`` (``test_*.py``, ``*_test.py``, anything under a ``tests``/``test``/``testing``
  folder, whatever pytest's globs match), and every file a collected node id names;
* every ``conftest.py``, ``pytest.ini``, ``.pytest.ini``, ``pytest.toml`` and ``.pytest.toml``
  (pytest 9 reads the last two first);
* the data the tests read: files a test module or conftest.py opened during the baseline run
  (``expected.json`` beside the tests), unless the user opts in (``allow_data_edits``);
* the docstrings of a module whose doctests run (``--doctest-modules`` names ``m.py::m.f``): the
  rest of such a module is ordinary code, which a fix may change;
* the pytest sections of shared configuration files: ``[tool.pytest*]`` (and ``[tool.frognano]``)
  of any ``pyproject.toml``, ``[tool:pytest]`` of ``setup.cfg``, ``[pytest]`` of ``tox.ini``.
  The rest of those files is ordinary project data.

A user who wants fixes to test code opts in (``allow_test_edits``): test modules and
``conftest.py`` may then change; pytest's configuration and ``[tool.frognano]`` never do (they
decide which tests run and how FrogNano judges them, which no test fix needs).
"""

from __future__ import annotations

import ast
import configparser
import posixpath
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..project_paths import DEFAULT_PYTHON_FILES, is_test_code, nodeid_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["CONFIG_FILES", "Specification"]

RULE = "the tests are the specification"
# Files pytest may take its configuration from; any of them in a test folder or above one can
# change how the tests run (pytest looks for one upwards from the common folder of its arguments).
CONFIG_FILES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini",
                "setup.cfg")
_WHOLE_CONFIG = frozenset({"pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"})
_NATIVE_TOML = ("pytest.toml", ".pytest.toml")  # pytest 9: a [pytest] table of native TOML values
_INI_SECTIONS = ("tool:pytest", "pytest")  # setup.cfg reads the first, tox.ini the second


def _toml_sections(text: str) -> dict | None:
    """``[tool.pytest*]`` and ``[tool.frognano]`` of a pyproject.toml; None when it does not parse."""
    try:
        tool = tomllib.loads(text).get("tool", {})
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(tool, dict):
        return {}
    return {k: v for k, v in tool.items() if k.startswith("pytest") or k == "frognano"}


def _ini_sections(text: str) -> dict | None:
    """The pytest sections of a setup.cfg or tox.ini; None when it does not parse."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except (configparser.Error, ValueError):
        return None
    return {s: dict(parser.items(s, raw=True)) for s in _INI_SECTIONS if parser.has_section(s)}


def _sections(name: str, text: str | None) -> dict | None:
    if text is None:  # a file that does not exist holds no configuration
        return {}
    return _toml_sections(text) if name == "pyproject.toml" else _ini_sections(text)


def _python_files_value(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def python_files_globs(read: Callable[[str], str | None]) -> list[str]:
    """pytest's ``python_files`` patterns, from whichever root configuration file sets them.

    All of them are collected (not only the file pytest would pick): over-protecting a file costs
    a fix nothing it needs, under-protecting one lets a fix rewrite a test.
    """
    globs: list[str] = []
    for name in _NATIVE_TOML:
        text = read(name)
        if text is None:
            continue
        try:
            table = tomllib.loads(text).get("pytest", {})
        except (tomllib.TOMLDecodeError, ValueError, RecursionError):
            continue
        if isinstance(table, dict):
            globs += _python_files_value(table.get("python_files"))
    for name in ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg"):
        text = read(name)
        if text is None:
            continue
        for options in (_ini_sections(text) or {}).values():
            globs += _python_files_value(options.get("python_files"))
    text = read("pyproject.toml")
    if text is not None:
        for key, table in (_toml_sections(text) or {}).items():
            if key.startswith("pytest") and isinstance(table, dict):
                options = table.get("ini_options", table)
                if isinstance(options, dict):
                    globs += _python_files_value(options.get("python_files"))
    return globs


def _is_doctest(nodeid: str) -> bool:
    """Whether ``nodeid`` names a doctest of a Python module (``--doctest-modules``): its name is
    the dotted name of what holds the docstring (``m.py::m.is_adult``, ``pkg/m.py::pkg.m.C.f``,
    ``m.py::m`` for the module's own), where a test's is an identifier (``test_x[1.5]``)."""
    path, _, name = nodeid.partition("::")
    if not path.endswith(".py") or not name or "::" in name:
        return False
    name = name.split("[", 1)[0]
    return "." in name or name == posixpath.basename(path)[:-3]


def _docstrings(text: str | None) -> list[str] | None:
    """Every docstring of a module in order, and its ``__test__`` table (what doctest runs);
    None when the text does not parse.  Renaming or moving code keeps them; editing one does not."""
    if text is None:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append(doc)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__test__" for t in targets) and node.value is not None:
                found.append(ast.dump(node.value))
    return found


@dataclass(frozen=True)
class Specification:
    """The specification of one project: which paths and sections a fix may not change."""

    test_files: frozenset[str] = frozenset()  # files named by collected node ids
    globs: tuple[str, ...] = DEFAULT_PYTHON_FILES  # pytest's python_files
    data: frozenset[str] = frozenset()  # files test code read in the runs (``Workspace.test_reads``)
    doctest_modules: frozenset[str] = frozenset()  # modules whose docstrings' doctests are collected

    @classmethod
    def load(cls, read: Callable[[str], str | None], nodeids: Iterable[str] = (),
             data: Iterable[str] = ()) -> "Specification":
        """``read(rel)``: the text of a project file, None when missing or unreadable."""
        ids = [n for n in nodeids if n]
        files = frozenset(nodeid_file(n) for n in ids if not _is_doctest(n))
        doctests = frozenset(nodeid_file(n) for n in ids if _is_doctest(n)) - files
        globs = tuple(dict.fromkeys([*DEFAULT_PYTHON_FILES, *python_files_globs(read)]))
        return cls(files, globs, frozenset(data), doctests)

    @classmethod
    def of_workspace(cls, ws, nodeids: Iterable[str] = ()) -> "Specification":
        """The specification as the tests see it (the shadow, editor buffers included)."""

        def read(rel: str) -> str | None:
            if rel not in ws.entries:
                return None
            try:
                return ws.read(rel)
            except (OSError, UnicodeDecodeError, SyntaxError):
                return None

        reads = ws.test_reads() if hasattr(ws, "test_reads") else ()
        return cls.load(read, nodeids, reads)

    # -- paths ----------------------------------------------------------------------------
    def is_test(self, rel: str) -> bool:
        """Whether ``rel`` is part of the tests: a file a collected node id names, or test code
        under the project's ``python_files`` (``project_paths.is_test_code``, conservative)."""
        return rel.replace("\\", "/") in self.test_files or is_test_code(rel, self.globs)

    def is_protected(self, rel: str) -> bool:
        """Whether the file as a whole is (or holds part of) the specification: what verification
        restores to its pristine text before it runs the tests."""
        return self.is_test(rel) or posixpath.basename(rel.replace("\\", "/")) in CONFIG_FILES

    def protected(self, rels: Iterable[str]) -> list[str]:
        return sorted(r for r in rels if self.is_protected(r))

    def strays(self, rels: Iterable[str]) -> list[str]:
        """Paths that must not exist in a shadow copy unless the project has them: a configuration
        file or conftest.py in a test folder or above one (a run of the code under test could
        write one to change how later runs judge), and bytecode caches there (a planted
        ``__pycache__`` can stand in for a test module)."""
        known = set(rels)
        folders = {""}
        for rel in known:
            if self.is_test(rel):
                folder = posixpath.dirname(rel)
                while folder:
                    folders.add(folder)
                    folder = posixpath.dirname(folder)
        names = ("conftest.py", *CONFIG_FILES, "__pycache__")
        return sorted(p for f in folders for p in (posixpath.join(f, n) for n in names) if p not in known)

    # -- changes --------------------------------------------------------------------------
    def reason(self, rel: str, before: str | None = None, after: str | None = None, *,
               allow_test_edits: bool = False) -> str | None:
        """One line saying why changing ``rel`` from ``before`` to ``after`` touches the
        specification, or None when it does not.

        Without texts, only path-level rules apply (a test module, conftest.py, pytest.ini).
        """
        rel = rel.replace("\\", "/")
        name = posixpath.basename(rel)
        opt_in = "; set allow_test_edits to allow fixes to test code"
        if name in _WHOLE_CONFIG:
            return f"{rel} is pytest configuration: {RULE}, and a fix may not change how they run"
        if name == "conftest.py" and not allow_test_edits:
            return f"{rel} is a conftest.py: {RULE}, and a fix may not change them{opt_in}"
        if name in CONFIG_FILES and (before is not None or after is not None) and before != after:
            old, new = _sections(name, before), _sections(name, after)
            if old != new or new is None:
                what = "[tool.pytest*] or [tool.frognano]" if name == "pyproject.toml" else \
                    "its [tool:pytest] or [pytest] section"
                return f"{rel}: the edit changes {what}: {RULE}, and a fix may not change pytest's " \
                       "or FrogNano's configuration"
        # (the rest of a configuration file is project data, unless it lives among the tests)
        if self.is_test(rel):
            if allow_test_edits:
                return None
            what = "a test module" if name.endswith(".py") else "part of the tests (a test folder's file)"
            return f"{rel} is {what}: {RULE}, and a fix may not change them{opt_in}"
        if rel in self.data:
            return f"{rel} is data the tests read: {RULE}, and a fix may not change what they expect; " \
                   "set allow_data_edits to allow fixes to data files"
        if rel in self.doctest_modules and not allow_test_edits and before != after:
            old, new = _docstrings(before), _docstrings(after)
            if new is None:
                return f"{rel} has doctests, and the edit leaves it unparsable (its docstrings cannot be checked)"
            if old != new:
                return f"{rel}: the edit changes a docstring, and {rel}'s doctests are tests: {RULE}, and a " \
                       f"fix may change its code, not its docstrings{opt_in}"
        return None

    def edits_tests(self, rels: Iterable[str]) -> bool:
        """Whether any of ``rels`` is test code (what an opted-in fix's title announces)."""
        return any(self.is_test(r) or posixpath.basename(r) == "conftest.py" for r in rels)
