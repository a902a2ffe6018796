"""Path conventions shared by the worker (project interpreter) and FrogNano itself; stdlib only.

``is_test_file`` (which frames and which reads are the tests' own) is FrogNano's one rule in
``frognano/project_paths.py``.  This file runs in the *project's* interpreter with only this
folder on ``sys.path``: ``frognano`` may not be importable there, or be another version of it
(the project's own venv), so instead of a copy of the rule, which drifted from the server's
once, it loads that one file by its path (``project_paths`` imports only the standard library
for this reason).  Inside FrogNano the ordinary import is used, so there is one module object.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# Beside a run's results: the project files test code read (frognano_reads writes, Workspace reads).
READS_RECORD = "reads.txt"


def _project_paths():  # noqa: ANN202 - a module
    if __package__:  # imported by FrogNano (frognano.sandbox._worker.frognano_paths)
        from ... import project_paths

        return project_paths
    name = "frognano_project_paths"  # frognano_*: no project module can be called so
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "project_paths.py")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


is_test_file = _project_paths().is_test_file
