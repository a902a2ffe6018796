"""Which project files the tests read: an audit hook on ``open`` in the test process; stdlib only.

A test that compares the code's output with ``expected.json`` makes that file part of what it
says: a "fix" that rewrites the expected data instead of the code passes and proves nothing.
FrogNano therefore learns, from the runs themselves, which of the project's files the tests'
own code opens for reading, and its specification refuses fixes to them unless the user opts
in (``allow_data_edits``).

Only reads made by test code count: the first frame inside the shadow that leads to the
``open`` must be a test module or a conftest.py (``frognano_paths.is_test_file``).  A data file
the library under test loads (its own table, its own configuration) is the library's, and a bug
may well live there.  Python sources, bytecode and folders are not data.

Each new path is appended at once, one ``<reader>\\t<path>`` line per process and path, to
``reads.txt`` in the folder of the run's results (a run killed mid-test has still said what it
read); FrogNano reads the lines back (``Workspace.test_reads``).  The hook cannot be removed, so
``install`` installs it once per process and later calls only retarget it.
"""

from __future__ import annotations

import os
import sys

from frognano_paths import READS_RECORD, is_test_file

_SKIP_SUFFIXES = (".py", ".pyc", ".pyo", ".pyi", ".pth", ".so", ".pyd")
_state: dict = {}


def install(shadow: str, results: str) -> None:
    """Record, in ``reads.txt`` beside ``results``, the shadow's files that test code reads."""
    first = not _state
    _state.update(root=os.path.realpath(shadow) + os.sep, shadow=shadow.rstrip(os.sep) + os.sep,
                  record=os.path.join(os.path.dirname(results), READS_RECORD), busy=False)
    _state.setdefault("seen", set())
    if first:
        sys.addaudithook(_hook)


def _rel(path: str) -> str | None:
    """``path`` relative to the shadow ("/"-separated), None when outside it."""
    for root in (_state["shadow"], _state["root"]):
        if path.startswith(root):
            return path[len(root):].replace(os.sep, "/")
    return None


def _reader() -> str | None:
    """The project file whose code made this ``open``: the first frame inside the shadow."""
    frame = sys._getframe(3)  # _reader <- _note <- _hook <- the caller of open
    while frame is not None:
        rel = _rel(frame.f_code.co_filename)
        if rel is not None:
            return rel
        frame = frame.f_back
    return None


def _hook(event: str, args: tuple) -> None:
    if event != "open" or _state.get("busy"):
        return
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(path, int) or path is None:
        return
    if mode is not None:
        if any(c in str(mode) for c in "wax+"):
            return
    elif isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR):
        return
    _state["busy"] = True
    try:
        _note(path)
    except Exception:  # noqa: BLE001 - recording must never change what a test sees
        pass
    finally:
        _state["busy"] = False


def _note(path) -> None:  # noqa: ANN001 - str, bytes or PathLike
    path = os.path.abspath(os.fsdecode(path))
    rel = _rel(path)
    if rel is None or rel.endswith(_SKIP_SUFFIXES) or "__pycache__/" in rel or rel in _state["seen"]:
        return
    reader = _reader()
    if reader is None or not is_test_file(reader):
        return
    _state["seen"].add(rel)
    if "\t" in rel or "\n" in rel or "\t" in reader or "\n" in reader:
        return
    fd = os.open(_state["record"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{reader}\t{rel}\n".encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)
