"""The robustness suite: bad input and faults, each asserting its named error or behaviour
and that nothing outside FrogNano's shadow copy changed.

``outside`` is the guard every case uses: it hashes the files a case must leave alone (the
project, a sentinel folder standing for "anywhere else on the machine") before the case and
compares after it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest


def _hashes(roots: list[Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    for root in roots:
        if root.is_file():
            out[str(root)] = hashlib.sha256(root.read_bytes()).hexdigest()
            continue
        for p in sorted(root.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class OutsideGuard:
    """Hashes of files outside the shadow copy, taken before a case; ``check()`` compares."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel
        self.roots: list[Path] = [sentinel]
        self.before: dict[str, str] = {}

    def watch(self, *paths: Path) -> "OutsideGuard":
        self.roots.extend(Path(p) for p in paths)
        self.before = _hashes(self.roots)
        return self

    def check(self) -> None:
        after = _hashes(self.roots)
        changed = sorted(k for k in set(self.before) | set(after) if self.before.get(k) != after.get(k))
        assert not changed, f"files outside the shadow copy changed: {changed}"


@pytest.fixture
def outside(tmp_path):
    """A guard over a sentinel folder (with a file in it) and whatever the case adds by ``watch``.

    The check runs after the case too, so a case that forgets to call ``check()`` is still held to it.
    """
    sentinel = tmp_path / "elsewhere"
    sentinel.mkdir()
    (sentinel / "precious.txt").write_text("do not touch\n")
    guard = OutsideGuard(sentinel)
    guard.watch()
    yield guard
    guard.check()
