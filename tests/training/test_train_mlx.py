"""``frognano train --backend mlx``: the MLX learner's pieces, then the whole path on tiny-ci.

The learner is checked against its own promises: a checkpoint resumes to the same next step
(weights and statistics identical), the adapter is in mlx-lm's format, the fused final model
computes what the trained policy computed, and a rollout records exactly what the loss scores.
The command-line runs mirror ``test_train.py``'s torch ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx_lm")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from frognano.config import Settings  # noqa: E402
from frognano.errors import UsageError  # noqa: E402
from frognano.training.config import PRESETS, TrainConfig  # noqa: E402
from frognano.training.env import RepoEnv  # noqa: E402
from frognano.training.grpo import Sample  # noqa: E402
from frognano.training.tasks import parse_row  # noqa: E402

from ..conftest import CHILD_TIMEOUT, run_frognano  # noqa: E402
from .conftest import assert_fix_runs_the_model  # noqa: E402
from .test_train import kill_after_first_step, server_runs_the_model  # noqa: E402


def _frognano(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, **kw)


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_the_config_pairs_the_base_model_with_the_backend():
    assert TrainConfig(backend="mlx").backend == "mlx"
    assert TrainConfig(backend="mlx", base_model="mlx:some/model").base_model == "mlx:some/model"
    with pytest.raises(UsageError, match="mlx:PATH_OR_ID for backend mlx"):
        TrainConfig(backend="mlx", base_model="torch:some/model")
    with pytest.raises(UsageError, match="torch:PATH_OR_ID for backend torch"):
        TrainConfig(backend="torch", base_model="mlx:some/model")


def _logits(model, ids: list[int]) -> np.ndarray:
    return np.array(model(mx.array([ids]))[0].astype(mx.float32))


def _group(policy, temperature: float) -> list[Sample]:
    """Two episodes of one group with different rewards, their log-probabilities the policy's own
    (on-policy: ratio 1), so a step moves the adapters."""
    from frognano.training.mlx_grpo import sequence_logprobs

    prompt = policy.encode_prompt([{"role": "user", "content": "fix the failing test"}])
    samples = [Sample(prompt, [40, 41, 42, 43], [1, 1, 1, 1], [0.0] * 4, 1.0, 0),
               Sample(prompt, [50, 51, 52], [1, 1, 1], [0.0] * 3, 0.0, 0)]
    for s, lp in zip(samples, sequence_logprobs(policy.model, samples, temperature=temperature)):
        s.logprobs = [float(x) for x in np.array(lp)]
    return samples


@pytest.mark.parametrize("head", [False, True], ids=["blocks", "blocks+lm_head"])
def test_the_mlx_learner_resumes_exactly_and_fuses_what_it_learned(tmp_path, head):
    """With ``head``, as the tiny preset trains: a model with its own output layer, adapted too."""
    from frognano.runtime.load import load_model
    from frognano.training.backends import make_learner

    config = TrainConfig(backend="mlx", grpo={"learning_rate": 5e-2})
    if head:
        config = TrainConfig(backend="mlx", tiny={"tie_word_embeddings": False},
                             grpo={"learning_rate": 5e-2, "lora_targets": TrainConfig(**PRESETS["tiny"]).lora_targets})
    grpo = config.grpo_config()
    learner = make_learner(config, tmp_path)
    assert learner.policy.name == "policy:base" and (tmp_path / "base" / "config.json").exists()
    samples = _group(learner.policy, grpo.temperature)
    assert learner.step(samples, grpo)["stepped"] == 1.0
    checkpoint = tmp_path / "step-1"
    checkpoint.mkdir()
    learner.save(checkpoint)
    assert {p.name for p in checkpoint.iterdir()} == {"adapter", "optimizer.safetensors", "rng.json"}
    state = mx.load(str(checkpoint / "optimizer.safetensors"))
    assert int(state["step"].item()) == 1 and any(k.endswith("lora_a.m") for k in state)

    # The next step, taken by this learner and by one restored from the checkpoint: identical.
    ahead = learner.step(samples, grpo)
    resumed = make_learner(config, tmp_path, {"folder": checkpoint})
    again = resumed.step(samples, grpo)
    assert again == ahead
    mine = dict(tree_flatten(learner.policy.model.trainable_parameters()))
    theirs = dict(tree_flatten(resumed.policy.model.trainable_parameters()))
    assert mine.keys() == theirs.keys() and all(mx.array_equal(mine[k], theirs[k]).item() for k in mine)
    assert int(resumed.optimizer.state["step"].item()) == 2

    # The adapter is mlx-lm's own format: mlx-lm loads it onto the base model.  (Its loader
    # adapts the blocks only; an output layer's adapter is in the file, and in the fused model.)
    from mlx_lm import load as mlx_lm_load

    ids = samples[0].prompt_ids + samples[0].completion_ids
    if head:
        saved = mx.load(str(checkpoint / "adapter" / "adapters.safetensors"))
        assert {"lm_head.lora_a", "lm_head.lora_b"} <= set(saved)
    else:
        with_adapter, _ = mlx_lm_load(str(tmp_path / "base"), adapter_path=str(checkpoint / "adapter"))
        fresh = make_learner(config, tmp_path, {"folder": checkpoint})
        assert np.allclose(_logits(with_adapter, ids), _logits(fresh.policy.model, ids), atol=1e-5)

    # Fused and saved, the final model computes what the trained policy computed (to the
    # rounding of the merged weights: float16 on a GPU), which is not what the base model computes.
    trained = _logits(resumed.policy.model, ids)
    base = load_model(f"mlx:{tmp_path / 'base'}")
    final, export = resumed.finish(tmp_path, "none")
    assert final == tmp_path / "final" and export is None
    merged = load_model(f"mlx:{final}")
    moved = np.abs(trained - _logits(base.model, ids)).max()
    assert np.abs(trained - _logits(merged.model, ids)).max() < moved / 10, moved
    assert json.loads((final / "config.json").read_text())["model_type"] == "qwen3"


def test_the_tiny_base_has_the_dtype_mlx_computes_in_here(tmp_path):
    """The tiny preset's base for mlx is float32 on mlx's CPU build, where float16 arithmetic is
    emulated (tiny-ci's three steps: 29 s as float16, 13 s as float32), float16 with a GPU; the
    tiny model built for inference keeps float16, as converted MLX models are."""
    from frognano.runtime.export import mlx_float_dtype
    from frognano.runtime.tiny import build_tiny
    from frognano.training.learner import base_model_path

    config = TrainConfig(**{**PRESETS["tiny-ci"], "backend": "mlx"})
    base = Path(base_model_path(config, tmp_path))
    assert json.loads((base / "config.json").read_text())["torch_dtype"] == mlx_float_dtype()
    assert json.loads((build_tiny(tmp_path / "plain", "mlx") / "config.json").read_text())["torch_dtype"] == "float16"
    with pytest.raises(UsageError, match="bfloat16"):
        build_tiny(tmp_path / "other", "mlx", dtype="bfloat16")


def test_a_checkpoint_from_another_model_is_refused(tmp_path):
    from frognano.errors import FrogNanoError
    from frognano.training.backends import make_learner

    config = TrainConfig(backend="mlx")
    learner = make_learner(config, tmp_path)
    (tmp_path / "ck" / "adapter").mkdir(parents=True)
    mx.save_safetensors(str(tmp_path / "ck" / "adapter" / "adapters.safetensors"), {"x.lora_a": mx.zeros((2, 2))})
    with pytest.raises(FrogNanoError, match="does not fit"):
        learner.load_adapter(tmp_path / "ck")


@pytest.mark.parametrize("constrain", [False, True])
def test_an_mlx_rollout_records_what_the_loss_scores(arith, arith_tasks, tiny_torch, constrain):
    """The MLX twin of test_rollout.py's torch check: teacher-forced over the recorded sequence,
    renormalised over the recorded grammar masks, the policy gives back what it sampled with
    (float32 weights, so the comparison is exact to float precision)."""
    if constrain:
        pytest.importorskip("xgrammar")
    from frognano.runtime.mlx import MLXModel
    from frognano.training.mlx_grpo import sequence_logprobs
    from frognano.training.rollout import rollout

    policy = MLXModel.load(str(tiny_torch))
    settings = Settings(lanes=1, temperature=1.0, max_turns=3, max_new_tokens=40, constrain=constrain)
    env = RepoEnv(arith, settings, model=policy)
    try:
        state = env.reset(parse_row(arith_tasks[0]))
        for seed in range(20):  # a random model: the first seed whose clean episode has two turns
            r = rollout(env, state, group=3, seed=seed, tools=("candidates", "apply", "submit"))
            if r.turns >= 2 and not r.sample.error:
                break
    finally:
        env.close()
    s = r.sample
    assert r.status != "error" and r.turns >= 2 and 0 in s.mask and 1 in s.mask
    assert (s.allowed is not None) == constrain
    if constrain:
        assert any(a is not None for a, m in zip(s.allowed, s.mask) if m)
    again = np.array(sequence_logprobs(policy.model, [s], temperature=1.0)[0])
    diffs = [abs(float(a) - b) for a, b, m in zip(again, s.logprobs, s.mask) if m]
    assert max(diffs) < 1e-4


# -- the command line, end to end --------------------------------------------------------------------
@pytest.fixture(scope="session")
def trained_mlx(tmp_path_factory, training_cache):
    """One tiny-ci MLX training run for this module's tests: (run directory, the command's output).
    Session-scoped: a module-scoped one was made twice when xdist ran another module's test
    between this module's (about 60 s each time)."""
    tmp_path = tmp_path_factory.mktemp("trained-mlx")
    run = tmp_path / "run"
    done = run_frognano("train", "--preset", "tiny-ci", "--backend", "mlx", "-o", str(run), cwd=tmp_path,
                        cache=training_cache)
    return run, done


@pytest.mark.slow
def test_the_tiny_preset_trains_on_mlx_and_its_model_serves(trained_mlx, tmp_path):
    run, done = trained_mlx
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["eval"]["tasks"] > 0
    for r in rows[1:]:
        assert {"reward_mean", "zero_variance_fraction", "refills", "frontier", "stepped"} <= set(r)
    assert "eval" in rows[2] and "eval" in rows[3]
    # Checkpoints: the last two, each with the MLX learner's files and the loop's.
    latest = run / "checkpoints" / (run / "latest").read_text().strip()
    assert latest.name == "step-000003"
    assert {"adapter", "optimizer.safetensors", "rng.json", "sampler.json", "state.json"} <= {
        p.name for p in latest.iterdir()}
    assert {"adapters.safetensors", "adapter_config.json"} <= {p.name for p in (latest / "adapter").iterdir()}
    final = (run / "final").resolve()
    assert (final / "config.json").exists() and (final / "tokenizer.json").exists()
    assert f"--model mlx:{final}" in done.stdout and f'"frognano.model": "mlx:{final}"' in done.stdout
    assert "torch:" not in done.stdout
    # The fused model repairs through `frognano fix` (a deleted statement: the search cannot
    # undo it, so the model's episode runs) ...
    assert_fix_runs_the_model(_frognano, tmp_path, f"mlx:{final}")
    # ... and so does the 4-bit export.
    from frognano.runtime.base import Sampling
    from frognano.runtime.load import load_model

    assert (run / "final-mlx-4bit" / "config.json").exists()
    model = load_model(f"mlx:{run / 'final-mlx-4bit'}")
    assert model.generate([{"role": "user", "content": "hi"}], sampling=Sampling(max_tokens=4)).token_ids


@pytest.mark.slow
def test_a_killed_mlx_run_resumes_without_counting_a_step_twice(tmp_path, shared_training_cache):
    run = tmp_path / "run"
    cmd = ["train", "--preset", "tiny-ci", "--backend", "mlx", "-o", str(run)]
    kill_after_first_step(cmd, run, tmp_path)
    other = _frognano("train", "--preset", "tiny-ci", "--steps", "5", "--backend", "mlx", "-o", str(run),
                      "--resume", cwd=tmp_path)
    assert other.returncode == 2 and "another config" in other.stderr
    torch_instead = _frognano("train", "--preset", "tiny-ci", "-o", str(run), "--resume", cwd=tmp_path)
    assert torch_instead.returncode == 2 and "backend" in torch_instead.stderr
    done = _frognano(*cmd, "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["step"] for r in _rows(run)] == [0, 1, 2, 3]
    assert (run / "final" / "config.json").exists()
    assert f"--model mlx:{(run / 'final').resolve()}" in done.stdout


@pytest.mark.slow
def test_mlx_rollouts_on_worker_processes(tmp_path, shared_training_cache):
    run = tmp_path / "run"
    done = _frognano("train", "--preset", "tiny-ci", "--backend", "mlx", "--workers", "2", "-o", str(run),
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["groups"] >= 1 for r in rows[1:])


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_language_server_runs_the_mlx_trained_model(trained_mlx, example):
    run, done = trained_mlx
    assert done.returncode == 0, done.stderr[-3000:]
    await server_runs_the_model(f"mlx:{(run / 'final').resolve()}", example("calc"))
