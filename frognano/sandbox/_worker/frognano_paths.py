"""Path conventions shared by the worker (project interpreter) and FrogNano itself; stdlib only."""

from __future__ import annotations

_TEST_DIR_NAMES = frozenset({"tests", "test", "testing"})
# Beside a run's results: the project files test code read (frognano_reads writes, Workspace reads).
READS_RECORD = "reads.txt"


def is_test_file(relpath: str) -> bool:
    """Test modules, conftest files and anything under a tests/ folder: not where bugs are sought."""
    parts = relpath.replace("\\", "/").split("/")
    name = parts[-1]
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
        or any(p in _TEST_DIR_NAMES for p in parts[:-1])
    )
