"""Projects the synthesis tests share: green copies of the calc example and of the shop fixture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ..conftest import EXAMPLES

SHOP = Path(__file__).with_name("fixtures") / "shop"
IGNORE = shutil.ignore_patterns("__pycache__", ".pytest_cache")


@pytest.fixture
def calc(tmp_path):
    """examples/calc with its bug fixed, so its suite is green."""
    dest = tmp_path / "calc"
    shutil.copytree(EXAMPLES / "calc", dest, ignore=IGNORE)
    stats = dest / "calc" / "stats.py"
    stats.write_text(stats.read_text().replace("age > 18", "age >= 18"))
    return dest


@pytest.fixture
def shop(tmp_path):
    dest = tmp_path / "shop"
    shutil.copytree(SHOP, dest, ignore=IGNORE)
    return dest
