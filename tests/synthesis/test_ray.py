"""Synthesis through a real local Ray cluster (DESIGN §6): the same tasks as the local pool."""

from __future__ import annotations

import shutil
import time

import pytest

from frognano.synthesis.store import read_tasks
from frognano.synthesis.synth import synthesize

from ..conftest import EXAMPLES

try:
    import ray  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    pytest.skip("ray is not installed (pip install 'frognano[ray]')", allow_module_level=True)


@pytest.fixture
def calc(tmp_path):
    """examples/calc with its bug fixed, so its suite is green."""
    dest = tmp_path / "calc"
    shutil.copytree(EXAMPLES / "calc", dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    stats = dest / "calc" / "stats.py"
    stats.write_text(stats.read_text().replace("age > 18", "age >= 18"))
    return dest


@pytest.mark.slow
def test_ray_gives_the_same_tasks_as_the_local_pool(calc, tmp_path):
    # FROGNANO_CACHE_DIR (set per test by conftest) reaches the actors through the runtime env.
    t0 = time.monotonic()
    local = synthesize([calc], tmp_path / "local.jsonl", n=3, seed=11, workers=2)
    t1 = time.monotonic()
    on_ray = synthesize([calc], tmp_path / "ray.jsonl", n=3, seed=11, workers=2, ray="local")
    t2 = time.monotonic()
    print(f"local pool {t1 - t0:.1f}s, local Ray {t2 - t1:.1f}s")
    assert local.written == on_ray.written == 3
    ids = lambda p: [t.instance_id for t in read_tasks(p)]  # noqa: E731
    assert ids(tmp_path / "local.jsonl") == ids(tmp_path / "ray.jsonl")
    assert not ray.is_initialized()  # we started it, so we shut it down
