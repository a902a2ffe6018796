"""Per-test line coverage (the spectra) and test selection for changed lines."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..project_paths import is_test_file
from .results import RunResult

__all__ = ["CoverageMap", "is_test_file"]


@dataclass
class CoverageMap:
    """Which lines each test executed, and the inverse index file -> line -> tests."""

    by_test: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    _index: dict[str, dict[int, set[str]]] | None = field(default=None, repr=False)

    @classmethod
    def from_run(cls, run: RunResult) -> "CoverageMap":
        return cls({
            nodeid: {path: frozenset(lines) for path, lines in t.coverage.items()}
            for nodeid, t in run.tests.items()
            if t.coverage is not None
        })

    def __bool__(self) -> bool:
        return bool(self.by_test)

    @property
    def index(self) -> dict[str, dict[int, set[str]]]:
        if self._index is None:
            index: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
            for nodeid, files in self.by_test.items():
                for path, lines in files.items():
                    for line in lines:
                        index[path][line].add(nodeid)
            self._index = index
        return self._index

    def tests_covering(self, path: str, lines: Iterable[int] | None = None) -> set[str]:
        """Tests that executed any of ``lines`` of ``path`` (any line of it when lines is None)."""
        per_line = self.index.get(path, {})
        if lines is None:
            return set().union(*per_line.values()) if per_line else set()
        found: set[str] = set()
        for line in lines:
            found |= per_line.get(line, set())
        return found

    def save(self, path: Path) -> None:
        data = {n: {p: sorted(ls) for p, ls in files.items()} for n, files in self.by_test.items()}
        path.write_text(json.dumps(data))

    @classmethod
    def load(cls, path: Path) -> "CoverageMap":
        data = json.loads(path.read_text())
        return cls({n: {p: frozenset(ls) for p, ls in files.items()} for n, files in data.items()})
