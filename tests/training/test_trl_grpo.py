"""GRPO through TRL: ``GRPOTrainer`` driven by FrogNano's harness episodes, the example
``examples/trl_grpo/trl_grpo.py`` (not part of the package: ``frognano train`` uses its own step)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

from frognano.errors import UsageError
from frognano.training.env import RepoEnv, Reward, RewardConfig
from frognano.training.grpo import GRPOConfig, Sample
from frognano.training.rollout import Rollout
from frognano.training.tasks import parse_row

pytest.importorskip("trl")
pytest.importorskip("peft")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo" / "trl_grpo.py"


def _load_example():
    """The example as the module ``trl_grpo`` (as its README imports it, from its folder)."""
    spec = importlib.util.spec_from_file_location("trl_grpo", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("trl_grpo", module)
    spec.loader.exec_module(module)
    return module


_trl_grpo = _load_example()
HarnessRollout, build_trainer = _trl_grpo.HarnessRollout, _trl_grpo.build_trainer
frognano_reward, trl_config = _trl_grpo.frognano_reward, _trl_grpo.trl_config

TOOLS = ("candidates", "apply", "submit")


def _harness(grpo: GRPOConfig = GRPOConfig(), **kw) -> HarnessRollout:
    task = parse_row({"instance_id": "t", "repo": "/nowhere", "patch": "", "FAIL_TO_PASS": ["a::b"]})
    return HarnessRollout([task], "/nowhere/model", grpo=grpo, group_size=2, tools=TOOLS, max_turns=2,
                          max_new_tokens=8, temperature=grpo.temperature, seed=0, **kw)


def _rollout(mask, reward=0.0, *, truncated=False, error=False, allowed=None, status="submitted") -> Rollout:
    n = len(mask)
    sample = Sample([1, 2, 3], list(range(10, 10 + n)), list(mask), [-0.5 if m else 0.0 for m in mask], reward, 0,
                    truncated=truncated, error=error, allowed=allowed)
    return Rollout(sample, reward == 1.0, "error" if error else status, 2, 0.1, "boom" if error else "")


def _emit(h: HarnessRollout, rollouts, keep=True) -> dict:
    out = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "reward", "resolved", "error",
                           "status", "truncated")}
    for r in rollouts:
        h._emit(out, r, r.error if r is not None else "lost", 99, keep=keep)
    return out


def test_env_mask_trains_only_the_policys_clean_tokens():
    h = _harness()
    one = bytes([0b100, 0])  # the grammar allowed exactly token 2: forced
    two = bytes([0b110, 0])
    out = _emit(h, [
        _rollout([1, 0, 0, 1, 1], 1.0),
        _rollout([1, 0, 1], 0.0, truncated=True),  # DAPO overlong filtering: no loss, reward kept
        _rollout([1, 1, 1], 0.0, allowed=[one, two, None]),  # a forced token: not trained (see module)
        _rollout([1, 1], 0.0, error=True),  # infrastructure: no loss and no reward (not a 0)
        None,  # a task that could not be laid out
    ])
    assert out["env_mask"] == [[1, 0, 0, 1, 1], [0, 0, 0], [0, 1, 1], [0, 0], [0]]
    assert out["reward"] == [1.0, 0.0, 0.0, None, None]
    assert out["error"][:3] == ["", "", ""] and out["error"][3] == "boom" and out["error"][4] == "lost"
    assert out["truncated"] == [False, True, False, False, False]
    for key in ("completion_ids", "logprobs"):  # one entry per completion token, never empty (TRL reads ids[-1])
        assert [len(x) for x in out[key]] == [len(m) for m in out["env_mask"]]
    assert out["completion_ids"][4] == [99] and all(out["prompt_ids"])

    kept = _emit(_harness(GRPOConfig(mask_truncated=False), mask_forced=False),
                 [_rollout([1, 0, 1], truncated=True), _rollout([1, 1, 1], allowed=[one, two, None])])
    assert kept["env_mask"] == [[1, 0, 1], [1, 1, 1]]
    dropped = _emit(h, [_rollout([1, 0, 1], 1.0)], keep=False)  # a group without a gradient
    assert dropped["env_mask"] == [[0, 0, 0]] and dropped["reward"] == [1.0]
    long = _emit(_harness(GRPOConfig(max_completion_length=2)), [_rollout([1, 0, 1], 1.0)])
    assert long["completion_ids"] == [[10, 11]] and long["env_mask"] == [[0, 0]]


def test_the_reward_function_returns_the_environments_rewards():
    logged = {}
    rewards = frognano_reward(["a", "b", "c"], reward=[1.0, 0.0, None], error=["", "", "lost"],
                              resolved=[True, False, False], truncated=[False, True, False],
                              log_metric=lambda name, value: logged.__setitem__(name, value), prompts=["t"] * 3)
    assert rewards == [1.0, 0.0, None]
    assert logged == {"frognano/resolved": 0.5, "frognano/errors": pytest.approx(1 / 3),
                      "frognano/truncated": pytest.approx(1 / 3)}
    with pytest.raises(UsageError, match="reward"):
        frognano_reward(["a"])


def test_trl_config_is_our_variant(tmp_path):
    args = trl_config(tmp_path, GRPOConfig(loss_type="grpo", scale_rewards="std", epsilon_high=0.3, beta=0.01,
                                           temperature=0.7, max_completion_length=999, learning_rate=3e-4),
                      group_size=4, tasks_per_step=3, steps=5, seed=7)
    assert (args.loss_type, args.scale_rewards, args.epsilon, args.epsilon_high, args.beta) == \
        ("grpo", "group", 0.2, 0.3, 0.01)
    assert (args.num_generations, args.per_device_train_batch_size, args.generation_batch_size) == (4, 12, 12)
    assert (args.steps_per_generation, args.num_iterations, args.max_steps) == (1, 1, 5)
    assert (args.temperature, args.max_completion_length, args.learning_rate) == (0.7, 999, 3e-4)
    assert not args.mask_truncated_completions and not args.use_vllm and args.disable_dropout
    assert not args.use_bias_correction_kl and not args.vllm_importance_sampling_correction
    assert args.lr_scheduler_type == "constant" and args.weight_decay == 0.0 and args.save_strategy == "no"
    import torch

    if not torch.cuda.is_available():
        assert args.use_cpu and not args.bf16
    assert trl_config(tmp_path, GRPOConfig(), group_size=2, tasks_per_step=1, steps=1, seed=0).scale_rewards == "none"
    with pytest.raises(UsageError, match="beta"):
        trl_config(tmp_path, GRPOConfig(), group_size=2, tasks_per_step=1, steps=1, seed=0, trl_args={"beta": 0.1})


def test_build_trainer_refuses_what_cannot_train(arith_tasks, tmp_path):
    tasks = [parse_row(r) for r in arith_tasks]
    with pytest.raises(UsageError, match="grpo.temperature"):
        build_trainer(tasks, tmp_path / "m", tmp_path / "out", temperature=0.5)
    with pytest.raises(UsageError, match="tasks_per_step"):
        build_trainer(tasks, tmp_path / "m", tmp_path / "out", tasks_per_step=3)
    with pytest.raises(UsageError, match="steps must be"):
        build_trainer(tasks, tmp_path / "m", tmp_path / "out", steps=0)
    with pytest.raises(UsageError, match="names two tasks"):
        build_trainer([tasks[0], tasks[0]], tmp_path / "m", tmp_path / "out")
    with pytest.raises(UsageError, match="submit"):
        build_trainer(tasks, tmp_path / "m", tmp_path / "out", tools=("apply",))


@pytest.mark.slow
def test_trl_trains_lora_on_harness_episodes(arith, arith_tasks, tiny_torch, tmp_path, monkeypatch):
    import torch

    # Reward variance by construction: a random tiny model never fixes the bug, so every group
    # would score [0, 0] and carry no gradient.  The environment's reward is replaced by 1, 0,
    # 1, 0, ... (one per episode, so each group of two gets [1, 0]); everything else (episodes,
    # masks, TRL's loss and optimiser) is real.
    given = []
    values = itertools.cycle([1.0, 0.0])

    def fake_reward(self, state, patch, *, config=RewardConfig(), malformed=0):
        given.append(next(values))
        return Reward(given[-1], given[-1] == 1.0)

    monkeypatch.setattr(RepoEnv, "reward", fake_reward)
    tasks = [parse_row(r) for r in arith_tasks]
    trainer = build_trainer(tasks, str(tiny_torch), tmp_path / "out", grpo=GRPOConfig(learning_rate=1e-2,
                            mask_truncated=False), group_size=2, tasks_per_step=2, steps=1, tools=TOOLS, max_turns=2,
                            max_new_tokens=24, seed=0, reward_funcs=[_spy])
    harness = trainer.rollout_func
    outputs = []

    def recording(prompts, trainer):
        outputs.append((list(prompts), harness(prompts, trainer)))
        return outputs[-1][1]

    trainer.rollout_func = recording
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    assert lora and all(p.requires_grad for n, p in trainer.model.named_parameters() if "lora_" in n)
    _spy.calls.clear()
    try:
        trainer.train()
    finally:
        harness.close()

    # TRL gave the rollout each task id repeated per group member, and took one episode each.
    [(prompts, out)] = outputs
    assert len(prompts) == 4 and prompts[0] == prompts[1] and prompts[2] == prompts[3] != prompts[0]
    assert all(len(out[k]) == 4 for k in out)
    tok = trainer.processing_class
    replies = 0
    for ids, lps, mask, err in zip(out["completion_ids"], out["logprobs"], out["env_mask"], out["error"]):
        assert err == "" and len(ids) == len(lps) == len(mask) > 0
        assert 1 in mask  # kept: the group's rewards differ and mask_truncated is off
        trained = "".join(tok.decode([t]) for t, m in zip(ids, mask) if m)
        assert "<tool_response>" not in trained and "<|im_start|>" not in trained
        untrained = tok.decode([t for t, m in zip(ids, mask) if not m])
        replies += "<tool_response>" in untrained
    assert replies >= 1  # a multi-turn episode: its tool replies carry no loss
    # The reward function saw the environment's rewards, through the rollout's extra keys.
    assert out["reward"] == given == [1.0, 0.0, 1.0, 0.0]
    [seen] = _spy.calls
    assert seen["reward"] == given and seen["resolved"] == [True, False, True, False]
    # One optimiser step, on a loss over the policy's own tokens: the adapters moved.
    assert trainer.state.global_step == 1
    row = trainer.state.log_history[0]
    assert row["rewards/frognano_reward/mean"] == 0.5 and row["frac_reward_zero_std"] == 0.0
    assert row["grad_norm"] > 0
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before, after[n].detach()) for n, before in lora.items())


def _spy(completions, **kwargs):
    _spy.calls.append({k: list(v) for k, v in kwargs.items() if k in ("reward", "resolved", "error")})
    return [0.0] * len(completions)


_spy.calls = []
