"""Shared fixtures: every test gets its own FrogNano cache, and projects are written on demand."""

from __future__ import annotations

import contextlib
import shutil
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("frognano-cache")
    monkeypatch.setenv("FROGNANO_CACHE_DIR", str(cache))
    return cache


def write_project(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (dedented) under ``root`` and return it."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


@pytest.fixture
def make_project(tmp_path):
    def make(files: dict[str, str], name: str = "proj") -> Path:
        return write_project(tmp_path / name, files)

    return make


@pytest.fixture
def example(tmp_path):
    """A private copy of a bundled example project (so --apply tests never touch the repo)."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        return dest

    return copy


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes: to show a tree is byte-identical afterwards."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def raises_naming(error: type[Exception], names: Iterable[str]) -> Iterator[pytest.ExceptionInfo]:
    """``pytest.raises(error)`` whose message must also name every one of ``names``."""
    with pytest.raises(error) as info:
        yield info
    missing = [name for name in names if name not in str(info.value)]
    assert not missing, f"{info.value!r} does not name {missing}"
