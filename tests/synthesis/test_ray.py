"""Synthesis through a real local Ray cluster (docs/ARCHITECTURE.md §7): the same tasks as the local pool."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from frognano.synthesis.store import read_tasks
from frognano.synthesis.synth import synthesize


try:
    import ray  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    pytest.skip("ray is not installed (pip install 'frognano[ray]')", allow_module_level=True)

# Every test that starts a local Ray shares one xdist worker: "auto" finds a cluster another
# worker's test is running (test_auto_without_a_cluster_exits_2 connected to one and failed).
pytestmark = pytest.mark.xdist_group("ray")


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


# -- a cluster that is not there: a clear one-line error in seconds, not Ray's minutes of retries --

def _synth(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "frognano", "synth", *args], capture_output=True,
                          text=True, timeout=120, env=env)
    return proc, time.monotonic() - t0


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


@pytest.fixture
def closed_port():
    """A localhost port bound by this test but not listening: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_unreachable_cluster_fails_fast(calc, tmp_path, closed_port):
    out = tmp_path / "t.jsonl"
    for address in (f"127.0.0.1:{closed_port}", f"ray://127.0.0.1:{closed_port}"):
        proc, seconds = _synth(str(calc), "-o", str(out), "-n", "1", "--ray", address)
        assert proc.returncode == 2, proc.stderr
        line = _one_error_line(proc)
        assert address in line and "ray start --head" in line
        # ray.init alone retries a closed port for minutes (over 3 min measured); the probe answers
        # in well under a second, so 15 s is a generous bound that still tells the two apart.
        assert seconds < 15, f"{address}: {seconds:.1f}s"
        assert not out.exists()  # no task file, no tasks


def test_malformed_address_exits_2(calc, tmp_path):
    proc, _ = _synth(str(calc), "-o", str(tmp_path / "t.jsonl"), "--ray", "nonsense:abc")
    assert proc.returncode == 2
    assert "not a Ray address" in _one_error_line(proc)
    assert not (tmp_path / "t.jsonl").exists()


def test_auto_without_a_cluster_exits_2(calc, tmp_path, monkeypatch):
    from ray._private.services import find_gcs_addresses

    if find_gcs_addresses():  # a Ray running on this machine (another run's): "auto" would find it
        pytest.skip("a Ray cluster is running on this machine")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))  # no stale `ray start` address file
    proc, seconds = _synth(str(calc), "-o", str(tmp_path / "t.jsonl"), "--ray", "auto")
    assert proc.returncode == 2
    assert "--ray auto: no running Ray cluster" in _one_error_line(proc)
    assert seconds < 15
