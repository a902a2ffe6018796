"""``frognano train``: the whole path on the tiny preset, kill-and-resume, and the pieces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frognano.errors import UsageError
from frognano.training.config import PRESETS, TrainConfig
from frognano.training.pool import TaskPool
from frognano.training.rundir import RunDir
from frognano.training.tasks import parse_row

from ..conftest import CHILD_TIMEOUT
from .conftest import ADD, assert_fix_runs_the_model


def _frognano(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, **kw)


def test_config_checks_fields_against_each_other():
    assert TrainConfig(**PRESETS["tiny"]).grpo_config().temperature == 1.0
    with pytest.raises(UsageError, match="group_size"):
        TrainConfig(group_size=1)
    with pytest.raises(UsageError, match="grpo.temperature"):
        TrainConfig(grpo={"temperature": 0.5})
    with pytest.raises(UsageError, match="submit"):
        TrainConfig(tools=["apply"])
    with pytest.raises(UsageError, match="unknown train setting"):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(UsageError, match="epsilon_high"):
        TrainConfig(grpo={"epsilon": 0.3, "epsilon_high": 0.2})
    with pytest.raises(UsageError, match="candidates_listed"):
        TrainConfig(candidates_listed=16)
    with pytest.raises(UsageError, match="eval_samples"):
        TrainConfig(eval_samples=0)
    with pytest.raises(UsageError, match="give ray too"):
        TrainConfig(rollout_gpus=1)
    assert TrainConfig(rollout_gpus=0.5, ray="local", workers=2).rollout_gpus == 0.5


def test_a_run_directory_is_never_mixed_with_another_config(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.start(TrainConfig(steps=3), resume=False) is None
    with pytest.raises(UsageError, match="--resume"):
        run.start(TrainConfig(steps=3), resume=False)
    with pytest.raises(UsageError, match="steps"):
        run.start(TrainConfig(steps=4), resume=True)
    with pytest.raises(UsageError, match="no run to resume"):
        RunDir(tmp_path / "other").start(TrainConfig(), resume=True)


def test_a_config_written_before_the_rename_still_loads(tmp_path, caplog):
    """``max_candidates`` (the edits listed) became ``candidates_listed``: an older run's
    config.json resumes, with a warning; both names at once must agree."""
    config = TrainConfig(candidates_listed=3)
    older = {k: v for k, v in config.to_dict().items() if k != "candidates_listed"}
    with caplog.at_level("WARNING"):
        assert TrainConfig.from_dict({**older, "max_candidates": 3}) == config
    assert "max_candidates is deprecated" in caplog.text and "candidates_listed = 3" in caplog.text
    run = RunDir(tmp_path / "run")
    run.start(config, resume=False)
    run.config.write_text(json.dumps({**older, "max_candidates": 3}))
    assert run.start(config, resume=True) is None  # the same config, no checkpoint yet
    with pytest.raises(UsageError, match="give candidates_listed alone"):
        TrainConfig.from_dict({"max_candidates": 3, "candidates_listed": 4})
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"max_candidates": 2}))
    assert TrainConfig.read(file) == {"candidates_listed": 2}


def test_the_pool_serves_a_promoted_hint_with_the_same_bugs(arith_tasks):
    tasks = [parse_row({**t, "bug_function": "add", "bug_path": "arith/ops.py"}) for t in arith_tasks]
    pool = TaskPool(tasks, seed=0)
    assert pool.families == ["binop-b1-function-d0", "negate-b1-file-d1"]
    first, again = pool.draw("binop-b1-function-d0"), pool.draw("binop-b1-function-d0")
    assert first.instance_id == again.instance_id == "arith.A"  # one task in the family: cycles
    weaker = pool.draw("binop-b1-test-d0")  # promoted: the same bug, only the failing test named
    assert weaker.instance_id == "arith.A" and weaker.family == "binop-b1-test-d0"
    assert weaker.hint == f"Failing test: {ADD}"
    assert pool.cursor["binop-b1-function-d0"] == 2 and pool.cursor["binop-b1-test-d0"] == 1


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _board(run: Path) -> dict[str, list[int]]:
    """The steps TensorBoard shows for each scalar tag of the run (purged steps left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_metric_rows_become_tensorboard_tags():
    from frognano.training.board import scalars

    row = {"step": 3, "seconds": 9.5, "loss": -0.1, "stepped": 1.0, "eval": {"resolve_rate": 0.25, "ci": [0.1, 0.4]},
           "frontier": {"arith-b1-function-d0": 0.4}, "ends": {"submitted": 5}, "note": "x", "nan": float("nan"),
           "paths": {"apply 1 > submit": 4}}
    assert scalars(row) == {"train/loss": -0.1, "train/stepped": 1.0, "eval/resolve_rate": 0.25,
                            "frontier/arith-b1-function-d0": 0.4, "ends/submitted": 5.0}


@pytest.mark.slow
def test_the_tiny_preset_trains_and_its_model_serves(trained, tmp_path):
    run, done = trained
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # 0: the untrained model's held-out rate
    assert rows[0]["eval"]["tasks"] > 0
    rows = rows[1:]
    for r in rows:  # reward, dynamic sampling and the frontier, every step
        assert {"reward_mean", "zero_variance_fraction", "refills", "frontier", "stepped"} <= set(r)
        assert r["frontier"] and all(0 <= p <= 1 for p in r["frontier"].values())
        # What the episodes did: the commonest call sequences, with apply's index; never an
        # opening submit (it is offered once a file is changed).
        assert r["paths"] and all(name.split(" ")[0] in ("candidates", "apply", "submit", "?")
                                  for path in r["paths"] for name in path.split(" > "))
        assert "submit" not in r["openers"] and not any(p.startswith("submit") for p in r["paths"])
    assert "eval" in rows[1] and "eval" in rows[2] and rows[2]["eval"]["tasks"] > 0
    board = _board(run)  # the same rows, live in TensorBoard
    assert board["train/reward_mean"] == [1, 2, 3] and board["eval/resolve_rate"] == [0, 2, 3]
    assert any(tag.startswith("frontier/") for tag in board)
    final = (run / "final").resolve()
    assert f"--model torch:{final}" in done.stdout and f'"frognano.model": "torch:{final}"' in done.stdout
    # The merged model repairs through `frognano fix` (a bug the search cannot undo: a deleted
    # statement, so the model's episode runs) ...
    assert_fix_runs_the_model(_frognano, tmp_path, f"torch:{final}")
    # ... and the export loads in the MLX backend.
    if (run / "final-mlx-4bit").exists():
        from frognano.runtime.base import Sampling
        from frognano.runtime.load import load_model

        model = load_model(f"mlx:{run / 'final-mlx-4bit'}")
        assert model.generate([{"role": "user", "content": "hi"}], sampling=Sampling(max_tokens=4)).token_ids


@pytest.mark.slow
def test_a_killed_run_resumes_without_counting_a_step_twice(tmp_path, shared_training_cache):
    run = tmp_path / "run"
    kill_after_first_step(["train", "--preset", "tiny-ci", "-o", str(run)], run, tmp_path)
    other = _frognano("train", "--preset", "tiny-ci", "--steps", "5", "-o", str(run), "--resume", cwd=tmp_path)
    assert other.returncode == 2 and "another config" in other.stderr
    done = _frognano("train", "--preset", "tiny-ci", "-o", str(run), "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["step"] for r in _rows(run)] == [0, 1, 2, 3]
    assert _board(run)["train/reward_mean"] == [1, 2, 3]  # the redone step's first events purged
    assert (run / "final" / "config.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("where", [["--workers", "2"],
                                   pytest.param(["--workers", "2", "--ray", "local"],
                                                marks=pytest.mark.xdist_group("ray"))],  # test_ray.py says why
                         ids=["processes", "ray"])
def test_rollouts_on_workers(tmp_path, where, shared_training_cache):
    if "--ray" in where:
        pytest.importorskip("ray")
    run = tmp_path / "run"
    done = _frognano("train", "--preset", "tiny-ci", "-o", str(run), *where, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["groups"] >= 1 and r["errors"] == 0 for r in rows[1:])


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_language_server_runs_the_trained_model(trained, example):
    run, done = trained
    assert done.returncode == 0, done.stderr[-3000:]
    await server_runs_the_model(f"torch:{(run / 'final').resolve()}", example("calc"))


async def server_runs_the_model(spec: str, root, more: dict | None = None) -> None:
    """``frognano serve`` with the model ``spec`` and no search candidates runs its episode."""
    from ..server.lsp import open_doc, run_command, save, serve, wait_state

    # No search candidates: the fix can only come from the trained model's episode.
    options = {"debounceMs": 0, "model": spec, "maxCandidates": 0, "maxPairs": 0, "episodes": 1, **(more or {})}
    async with serve(root, options) as client:
        open_doc(client, root / "calc/stats.py")
        save(client, root / "calc/stats.py")
        await wait_state(client, "failing")
        result = await run_command(client, "frognano.fix")
        # A random model rarely repairs anything; what matters is that it loaded and ran an episode.
        assert result["status"] in ("fixed", "unfixed"), result
        if result["status"] == "unfixed":
            assert "1 model episode ended" in result["message"], result


def kill_after_first_step(args: list[str], run, cwd) -> None:
    """Run ``frognano ARGS`` and SIGKILL it mid-run, right after its first step's checkpoint."""
    proc = subprocess.Popen([sys.executable, "-m", "frognano", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not (run / "latest").exists() or (run / "latest").read_text().strip() != "step-000001":
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (run / "final").exists()
