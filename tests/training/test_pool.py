"""The training task pool: real synthesis rounds on the small ``arith`` project, in the background."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from frognano.errors import UsageError
from frognano.synthesis.store import patch_hash, read_tasks
from frognano.synthesis.synth import synthesize
from frognano.training.config import TrainConfig
from frognano.training.pool import SynthPool, round_path

from ..conftest import write_project
from .conftest import FILES

N = 2  # tasks per repository and round


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(the arith repository, a folder holding its held-out tasks and the pool's round 0).

    The held-out tasks are synthesised with the pool's own seed: without the exclusion, round 0
    would be exactly those bugs."""
    tmp = tmp_path_factory.mktemp("pool")
    repo = write_project(tmp / "arith", FILES)
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "clean"], check=True)
    run = tmp / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FROGNANO_CACHE_DIR", str(tmp / "cache"))
        synthesize([repo], run / "heldout.jsonl", n=N, seed=0)
        SynthPool(run / "pool", [repo], run / "heldout.jsonl", n=N, seed=0, rounds=0)
    return repo, run


@pytest.fixture
def run(made, tmp_path) -> Path:
    """A copy of the made run folder, for one test."""
    return Path(shutil.copytree(made[1], tmp_path / "run"))


def _pool(made, run: Path, rounds: int) -> SynthPool:
    return SynthPool(run / "pool", [made[0]], run / "heldout.jsonl", n=N, seed=0, rounds=rounds)


def _wait(pool: SynthPool, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while pool.running:
        assert time.monotonic() < deadline, "the background synthesis did not finish"
        time.sleep(0.1)


def _hashes(path: Path) -> list[str]:
    return [patch_hash(t.patch) for t in read_tasks(path)]


def _draws(pool: SynthPool, families: list[str], k: int) -> list[tuple[str, str]]:
    return [(t.instance_id, t.family) for t in (pool.draw(families[i % len(families)]) for i in range(k))]


def test_background_rounds_appear_at_refresh_and_never_hold_held_out_bugs(made, run):
    pool = _pool(made, run, rounds=2)
    assert len(pool) == N and pool.taken == 1
    pool.start()
    _wait(pool)
    assert pool.error is None
    assert round_path(run / "pool", 2).exists() and not round_path(run / "pool", 3).exists()
    assert len(pool) == N  # the loop sees new rounds only when it asks, at a step boundary
    assert pool.refresh() == 2 * N and len(pool) == 3 * N and pool.taken == 3
    assert pool.refresh() == 0
    held_out = set(_hashes(run / "heldout.jsonl"))
    in_pool = [h for r in range(3) for h in _hashes(round_path(run / "pool", r))]
    assert len(in_pool) == len(set(in_pool)) == 3 * N  # no bug twice
    assert not held_out & set(in_pool)
    assert not list((run / "pool").glob(".*"))  # no scratch store or temporary file left
    pool.close()


@pytest.mark.slow
def test_a_resumed_pool_draws_what_the_uninterrupted_one_draws(made, run):
    pool = _pool(made, run, rounds=2)
    pool.start()
    _wait(pool)
    first = pool.state_dict()  # a checkpoint taken while rounds 1 and 2 were on disk but not taken
    families = sorted({t.family for r in range(3) for t in read_tasks(round_path(run / "pool", r))})
    after_first = _draws(pool, families, 5)
    pool.refresh()
    _draws(pool, families, 3)
    second = json.loads(json.dumps(pool.state_dict()))  # as a checkpoint stores it
    after_second = _draws(pool, families, 12)
    assert second["rounds"] == 3

    again = _pool(made, run, rounds=2)  # a resumed run: its round 0 is on disk, nothing is synthesised
    again.load_state_dict(first)
    assert len(again) == N and again.taken == 1
    assert _draws(again, families, 5) == after_first
    again.load_state_dict(second)
    assert len(again) == 3 * N
    assert _draws(again, families, 12) == after_second

    # The synthesiser of a resumed run goes on from the first round not on disk, and a round
    # made again (its file lost) is the same round: its seed is the pool's seed plus its number.
    made_before = round_path(run / "pool", 2).read_bytes()
    round_path(run / "pool", 2).unlink()
    mtime = round_path(run / "pool", 1).stat().st_mtime_ns
    again.start()
    _wait(again)
    assert round_path(run / "pool", 2).read_bytes() == made_before
    assert round_path(run / "pool", 1).stat().st_mtime_ns == mtime
    again.close()


@pytest.mark.slow
def test_synthesis_stops_when_the_repository_is_exhausted(made, run):
    pool = SynthPool(run / "pool", [made[0]], run / "heldout.jsonl", n=50, seed=0, rounds=5)
    pool.start()
    _wait(pool)
    assert pool.error is None
    assert round_path(run / "pool", 1).exists()
    last = max(r for r in range(6) if round_path(run / "pool", r).exists())
    assert last < 5 and round_path(run / "pool", last).read_text() == ""  # a round with nothing new ends it
    pool.refresh()
    assert len(pool) == sum(len(_hashes(round_path(run / "pool", r))) for r in range(last + 1))


def test_close_stops_the_background_synthesis_promptly(made, run):
    pool = _pool(made, run, rounds=20)
    pool.start()
    deadline = time.monotonic() + 60
    while not (run / "pool" / ".round-001.synth.jsonl").exists():  # round 1 is under way
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.3)
    started = time.monotonic()
    pool.close()
    assert time.monotonic() - started < 10
    assert not pool.running and pool.error is None
    for r in range(20):  # whatever was published is whole
        if round_path(run / "pool", r).exists():
            assert len(_hashes(round_path(run / "pool", r))) <= N


def test_a_failing_round_is_a_warning_never_an_error_of_the_caller(made, run, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr("frognano.synthesis.synth.synthesize", broken)
    pool = _pool(made, run, rounds=3)
    with caplog.at_level(logging.WARNING, logger="frognano.training.pool"):
        pool.start()
        _wait(pool)
    assert isinstance(pool.error, RuntimeError)
    assert "round 1 failed: the disk is full" in caplog.text
    assert pool.refresh() == 0 and len(pool) == N
    assert pool.draw(pool.families[0]).family == pool.families[0]
    pool.close()


def test_the_config_checks_synth_rounds():
    assert TrainConfig(synth_rounds=0).synth_rounds == 0
    with pytest.raises(UsageError, match="synth_rounds"):
        TrainConfig(synth_rounds=-1)
