"""The rules every face applies to a project's paths, in one place so that they cannot disagree.

* **Ignored folders**: what is never the project's own source, whatever ``.gitignore`` says
  (version control, caches, build outputs, ``*.egg-info``), and any virtualenv, by its
  ``pyvenv.cfg`` whatever its name.  The shadow copy's listing, the scope check, the language
  server and ``frognano watch`` all ask ``ignored_dir`` / ``ignored_path`` (the server once
  missed custom-named virtualenvs that watch mode skipped, so a ``pip install`` into ``env/``
  re-ran tests in the editor and not in the terminal).
* **Test files**: three distinct questions, one function each (see their docstrings):
  ``is_test_module`` (pytest collects tests from it, under the project's ``python_files``),
  ``is_test_file`` (test code by name and place alone: where bugs are never sought), and
  ``is_test_code`` (either, conservatively: what the specification protects).
* **Node ids**: the file a pytest node id names (``nodeid_file``).
* **File signatures**: whether a file changed since it was last looked at, without reading it
  (``file_signature``).

Layer 0: the standard library only, and deliberately so (not even ``frognano.errors``): the
test worker (``sandbox/_worker/frognano_paths.py``) runs in the *project's* interpreter, where
``frognano`` may not be importable, and loads this very file by its path for ``is_test_file``
rather than keep a second copy of the rule.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Iterable

__all__ = ["DEFAULT_PYTHON_FILES", "IGNORED_DIRS", "TEST_DIR_NAMES", "VENV_MARKER", "Signature", "file_signature",
           "ignored_dir", "ignored_name", "ignored_path", "is_test_code", "is_test_file", "is_test_module",
           "is_virtualenv", "nodeid_file"]

# -- ignored folders ------------------------------------------------------------------------------

# Folder names that are never part of the project's source, whatever .gitignore says.
IGNORED_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
    ".tox", ".nox", ".eggs", "node_modules", ".venv", "venv", "build", "dist", ".frognano",
    ".ipynb_checkpoints", ".cache", "htmlcov", ".hypothesis",
})
# What makes a folder a virtualenv (PEP 405), whatever it is called: ``env/``, ``py312/``.
VENV_MARKER = "pyvenv.cfg"


def ignored_name(name: str) -> bool:
    """Whether a folder called ``name`` is ignored by its name alone (``IGNORED_DIRS``,
    ``*.egg-info``).  Only for a name with no folder to look into; ``ignored_dir`` is the rule."""
    return name in IGNORED_DIRS or name.endswith(".egg-info")


def is_virtualenv(folder: str | os.PathLike[str]) -> bool:
    return os.path.exists(os.path.join(folder, VENV_MARKER))


def ignored_dir(folder: str | os.PathLike[str], name: str | None = None) -> bool:
    """Whether ``folder`` is never the project's: an ignored name, or a virtualenv of any name.
    ``name``: its base name, when the caller has it already (``os.scandir``, ``os.walk``)."""
    return ignored_name(name or os.path.basename(os.fspath(folder))) or is_virtualenv(folder)


def ignored_path(root: str | os.PathLike[str], rel: str, *, seen: dict[str, bool] | None = None) -> bool:
    """Whether the project-relative ``rel`` lies under an ignored folder of ``root`` (its own
    last part is not judged: a file may be called ``build``).  ``seen``: answers per folder,
    for a caller that asks about many paths at once (one ``stat`` per folder, not per file)."""
    parts = rel.replace(os.sep, "/").split("/")[:-1]
    folder = ""
    for part in parts:
        folder = f"{folder}/{part}" if folder else part
        found = seen.get(folder) if seen is not None else None
        if found is None:
            found = ignored_dir(os.path.join(root, folder), part)
            if seen is not None:
                seen[folder] = found
        if found:
            return True
    return False


# -- test files -----------------------------------------------------------------------------------

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")  # pytest's python_files when none is configured
TEST_DIR_NAMES = frozenset({"tests", "test", "testing"})


def _posix(rel: str) -> str:
    return rel.replace("\\", "/")


def is_test_module(rel: str, python_files: Iterable[str] = DEFAULT_PYTHON_FILES) -> bool:
    """Whether pytest collects tests from the Python file ``rel`` by its ``python_files``
    globs (the project's, else pytest's defaults), matched as pytest matches them: a glob
    without a slash against the file name, one with a slash against the path."""
    rel = _posix(rel)
    name = posixpath.basename(rel)
    if not name.endswith(".py"):
        return False
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(rel, "*/" + g) if "/" in g else fnmatch.fnmatch(name, g)
               for g in python_files)


def is_test_file(rel: str) -> bool:
    """Whether ``rel`` is test code or the tests' own file by its name and place alone, with no
    configuration at hand: a test module by the default names, anything named ``test_*``, a
    ``conftest.py``, anything under a ``tests``/``test``/``testing`` folder.  Where bugs are
    never sought (localisation), and whose reads of data files count as the tests' (the test
    process decides this by itself, with this same function)."""
    parts = _posix(rel).split("/")
    name = parts[-1]
    return (is_test_module(rel) or name.startswith("test_") or name == "conftest.py"
            or any(p in TEST_DIR_NAMES for p in parts[:-1]))


def is_test_code(rel: str, python_files: Iterable[str] = DEFAULT_PYTHON_FILES) -> bool:
    """Whether ``rel`` is part of the tests, conservatively: a test file, a test module, or a
    Python file that a ``python_files`` glob matches anywhere in its path (a helper in a
    ``test_utils/`` folder).  What the specification protects: it must never protect less than
    pytest collects, and over-protecting costs a fix nothing it needs.  (Not for choosing which
    tests to run: a helper module run "whole" runs none of the tests that use it.)"""
    globs = tuple(python_files)
    if is_test_file(rel) or is_test_module(rel, globs):
        return True
    rel = _posix(rel)
    return rel.endswith(".py") and any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(rel, "*/" + g) for g in globs)


# -- node ids -------------------------------------------------------------------------------------

def nodeid_file(nodeid: str) -> str:
    """The file a pytest node id names: ``tests/t.py::Cls::test_x[a::b]`` -> ``tests/t.py``."""
    return nodeid.split("::", 1)[0]


# -- file signatures ------------------------------------------------------------------------------

Signature = tuple[int, int]  # (size, mtime_ns)


def file_signature(path: str | os.PathLike[str]) -> Signature | None:
    """``(size, mtime_ns)`` of the file at ``path`` (through a symlink: what a reader of it
    gets), None when there is none: equal signatures mean "not changed since", cheaply, for a
    cache of file texts or a record of what the tests last ran on."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_size, st.st_mtime_ns
