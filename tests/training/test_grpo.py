"""GRPO's pieces as functions (``training/grpo.py``), and the torch trainer on the tiny model."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest

from frognano.errors import UsageError
from frognano.training.grpo import (
    STD_EPS, GRPOConfig, NonFiniteLossError, Sample, dynamic_filter, group_advantages, has_gradient, loss_mask,
    renormalised_logprob, zero_variance,
)


def sample(reward: float = 0.0, group: int = 0, completion=(5, 6, 7), mask=None, logprobs=None, **kw) -> Sample:
    completion = list(completion)
    mask = [1] * len(completion) if mask is None else list(mask)
    logprobs = [-1.0 if m else 0.0 for m in mask] if logprobs is None else list(logprobs)
    return Sample(prompt_ids=[1, 2, 3], completion_ids=completion, mask=mask, logprobs=logprobs,
                  reward=reward, group=group, **kw)


# --------------------------------------------------------------------------------------------
# Sample
# --------------------------------------------------------------------------------------------


def test_sample_lengths_must_agree():
    with pytest.raises(UsageError, match=r"completion_ids \(3\), mask \(2\) and logprobs \(3\)"):
        sample(mask=[1, 0], logprobs=[-1.0, -1.0, -1.0])
    with pytest.raises(UsageError, match="logprobs"):
        sample(logprobs=[0.0])
    with pytest.raises(UsageError, match="prompt_ids is empty"):
        Sample(prompt_ids=[], completion_ids=[1], mask=[1], logprobs=[-1.0], reward=0.0, group=0)
    with pytest.raises(UsageError, match="other than 0 and 1"):
        sample(mask=[1, 2, 0])


# --------------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------------


def test_group_advantages_mean_baseline_without_std():
    assert group_advantages([1, 0, 0, 0]) == [0.75, -0.25, -0.25, -0.25]
    assert group_advantages([1.0, 0.0]) == [0.5, -0.5]
    assert group_advantages([0.5, 0.25, 0.0]) == [0.25, 0.0, -0.25]


def test_group_advantages_std_scaling_uses_the_sample_std():
    # centred [0.75, -0.25, -0.25, -0.25]; sample variance (0.5625 + 3 * 0.0625) / 3 = 0.25
    expected = [c / (0.5 + STD_EPS) for c in (0.75, -0.25, -0.25, -0.25)]
    assert group_advantages([1, 0, 0, 0], scale="std") == pytest.approx(expected, rel=1e-12)
    # [1, 0]: std sqrt(0.5)
    assert group_advantages([1, 0], scale="std") == pytest.approx([0.5 / (math.sqrt(0.5) + STD_EPS),
                                                                    -0.5 / (math.sqrt(0.5) + STD_EPS)])


def test_group_advantages_degenerate_groups_are_zero():
    for scale in ("none", "std"):
        assert group_advantages([1, 1, 1], scale=scale) == [0.0, 0.0, 0.0]
        assert group_advantages([0.3], scale=scale) == [0.0]
        assert group_advantages([], scale=scale) == []
        # float noise of partial credit is not a signal, even when std scaling would blow it up
        assert group_advantages([0.1 + 0.2, 0.3], scale=scale) == [0.0, 0.0]
    with pytest.raises(UsageError, match="scale 'max'"):
        group_advantages([1, 0], scale="max")


# --------------------------------------------------------------------------------------------
# Dynamic filter
# --------------------------------------------------------------------------------------------


def test_dynamic_filter_drops_equal_reward_groups_and_errored_samples():
    groups = {
        0: [sample(1, 0), sample(1, 0)],                           # all right: no signal
        1: [sample(1, 1), sample(0, 1)],                           # informative
        2: [sample(1, 2), sample(0, 2, error=True)],               # one clean sample left: dropped
        3: [sample(1, 3), sample(0, 3), sample(1, 3, error=True)],  # kept without its errored sample
        4: [sample(0, 4), sample(0, 4), sample(1, 4, error=True)],  # equal once the error is gone
        5: [sample(0, 5, error=True), sample(1, 5, error=True)],   # nothing clean
    }
    kept, dropped = dynamic_filter(groups)
    assert list(kept) == [1, 3]
    assert dropped == 4
    assert [s.reward for s in kept[3]] == [1, 0]
    assert not any(s.error for g in kept.values() for s in g)
    # the errored sample's reward does not shift the baseline either
    assert group_advantages([s.reward for s in kept[3]]) == [0.5, -0.5]


def test_dynamic_filter_of_nothing():
    assert dynamic_filter({}) == ({}, 0)


def test_a_group_has_a_gradient_with_two_clean_episodes_rewarded_differently():
    assert has_gradient([sample(1), sample(0)]) and has_gradient([sample(1), sample(0, error=True), sample(0)])
    assert not has_gradient([sample(1), sample(1)]) and not has_gradient([sample(1), sample(0, error=True)])
    assert not has_gradient([sample(0, error=True)]) and not has_gradient([])
    # Zero variance: comparable episodes all rewarded alike; too few clean episodes is another reason.
    assert zero_variance([sample(1), sample(1), sample(0, error=True)])
    assert not zero_variance([sample(1), sample(0)]) and not zero_variance([sample(1), sample(0, error=True)])


# --------------------------------------------------------------------------------------------
# Loss mask
# --------------------------------------------------------------------------------------------


def test_loss_mask_environment_truncated_and_errors():
    # assistant tokens, then a tool result (environment), then the assistant again
    multi = sample(completion=[10, 11, 20, 21, 22, 12], mask=[1, 1, 0, 0, 0, 1])
    assert loss_mask(multi) == [1, 1, 0, 0, 0, 1]
    truncated = sample(completion=[10, 20, 11], mask=[1, 0, 1], truncated=True)
    assert loss_mask(truncated) == [0, 0, 0]  # DAPO overlong filtering
    assert loss_mask(truncated, mask_truncated=False) == [1, 0, 1]
    errored = sample(completion=[10, 20], mask=[1, 0], error=True)
    assert loss_mask(errored) == [0, 0]
    assert loss_mask(errored, mask_truncated=False) == [0, 0]
    # a copy: changing it never changes the sample
    loss_mask(multi)[0] = 0
    assert multi.mask[0] == 1


# --------------------------------------------------------------------------------------------
# Renormalised log-probabilities
# --------------------------------------------------------------------------------------------


def test_renormalised_logprob_by_hand():
    logits = [1.0, 2.0, 3.0]
    # two allowed tokens: e^3 / (e^1 + e^3) = 1 / (1 + e^-2)
    assert renormalised_logprob(logits, {0, 2}, 2, 1.0) == pytest.approx(-math.log(1 + math.exp(-2)), abs=1e-12)
    assert renormalised_logprob(logits, {0, 2}, 0, 1.0) == pytest.approx(-math.log(1 + math.exp(2)), abs=1e-12)
    # temperature 2 halves the gap: 1 / (1 + e^-1)
    assert renormalised_logprob(logits, {0, 2}, 2, 2.0) == pytest.approx(-math.log(1 + math.exp(-1)), abs=1e-12)
    # no mask: the plain log-softmax
    full = 3.0 - math.log(math.exp(1) + math.exp(2) + math.exp(3))
    assert renormalised_logprob(logits, None, 2, 1.0) == pytest.approx(full, abs=1e-12)
    # a single allowed token is certain
    assert renormalised_logprob(logits, {1}, 1, 0.7) == 0.0
    # a token the mask forbids has probability 0
    assert renormalised_logprob(logits, {0, 2}, 1, 1.0) == -math.inf
    # large logits do not overflow
    assert renormalised_logprob([1000.0, 1001.0], None, 1, 1.0) == pytest.approx(-math.log(1 + math.exp(-1)))


def test_renormalised_logprob_refuses_nonsense():
    with pytest.raises(UsageError, match="temperature"):
        renormalised_logprob([1.0, 2.0], None, 0, 0.0)
    with pytest.raises(UsageError, match="outside the vocabulary"):
        renormalised_logprob([1.0, 2.0], None, 2, 1.0)
    with pytest.raises(UsageError, match="empty"):
        renormalised_logprob([1.0, 2.0], set(), 0, 1.0)
    with pytest.raises(UsageError, match="allowed token ids"):
        renormalised_logprob([1.0, 2.0], {0, 5}, 0, 1.0)


def test_renormalised_logprob_matches_a_masked_torch_log_softmax():
    """What a torch backend computes (the sampler's masked_fill, then log_softmax) is the reference."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(50, generator=gen) * 3
    allowed = {3, 7, 8, 20, 49}
    keep = torch.zeros(50, dtype=torch.bool)
    keep[list(allowed)] = True
    temperature = 0.6
    masked = (logits / temperature).masked_fill(~keep, float("-inf"))
    got = torch.log_softmax(masked.double(), dim=-1)
    for token in allowed:
        assert renormalised_logprob(logits.tolist(), allowed, token, temperature) == pytest.approx(
            float(got[token]), abs=1e-6)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def test_config_defaults_are_the_named_variant():
    c = GRPOConfig()
    assert (c.loss_type, c.epsilon, c.epsilon_high, c.beta, c.scale_rewards, c.mask_truncated) == (
        "dapo", 0.2, 0.28, 0.0, "none", True)
    assert (c.lora_rank, c.lora_alpha) == (8, 16.0)
    for f in fields(GRPOConfig):
        assert f.metadata.get("help"), f"{f.name} has no help"


@pytest.mark.parametrize("kwargs, message", [
    ({"epsilon": 0.2, "epsilon_high": 0.1}, r"epsilon_high \(0.1\) must be at least epsilon \(0.2\)"),
    ({"loss_type": "dr_grpo", "scale_rewards": "std"}, "loss_type 'dr_grpo' with scale_rewards 'std'"),
    ({"loss_type": "ppo"}, "loss_type 'ppo'"),
    ({"scale_rewards": "rank"}, "scale_rewards 'rank'"),
    ({"epsilon": 0.0}, "epsilon must lie in"),
    ({"epsilon": 1.0, "epsilon_high": 1.2}, "epsilon must lie in"),
    ({"beta": -0.1}, "beta must not be negative"),
    ({"temperature": 0.0}, "temperature must be positive"),
    ({"learning_rate": 0.0}, "learning_rate must be positive"),
    ({"max_grad_norm": -1.0}, "max_grad_norm"),
    ({"lora_rank": 0}, "lora_rank"),
    ({"lora_alpha": 0}, "lora_alpha"),
    ({"lora_targets": ()}, "lora_targets is empty"),
    ({"max_completion_length": 0}, "max_completion_length"),
])
def test_config_cross_checks(kwargs, message):
    with pytest.raises(UsageError, match=message):
        GRPOConfig(**kwargs)


def test_config_allows_symmetric_clip_and_grpo_with_std():
    GRPOConfig(epsilon=0.2, epsilon_high=0.2)
    GRPOConfig(loss_type="grpo", scale_rewards="std", beta=0.04)


# --------------------------------------------------------------------------------------------
# torch: LoRA, log-probabilities, loss and step on the tiny model
# --------------------------------------------------------------------------------------------

PROMPT = [1, 40, 41, 42, 43]
GOOD = [60, 61, 62, 63]
BAD = [70, 71, 72, 73]


@pytest.fixture
def policy(tiny_torch):
    """A fresh LoRA-wrapped tiny Qwen3 (training changes it), seeded LoRA initialisation."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    from frognano.training.torch_grpo import lora_model

    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_torch))
    return lora_model(base, GRPOConfig())


def on_policy(model, specs, temperature: float = 1.0) -> list[Sample]:
    """Samples whose logprobs are the model's own (as if just sampled from it): ratio 1."""
    import torch

    from frognano.training.torch_grpo import sequence_logprobs

    drafts = [Sample(prompt_ids=list(PROMPT), completion_ids=list(c), mask=list(m), logprobs=[0.0] * len(c),
                     reward=r, group=g, **kw) for c, m, r, g, kw in specs]
    with torch.no_grad():
        lps = sequence_logprobs(model, drafts, temperature=temperature)
    for s, lp in zip(drafts, lps):
        s.logprobs = [float(x) if m else 0.0 for x, m in zip(lp, s.mask)]
    return drafts


def lora_state(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def test_lora_model_trains_only_the_adapters(policy, tiny_torch):
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert any(proj in n for n in trainable)
    transformers = pytest.importorskip("transformers")
    from frognano.training.torch_grpo import lora_model

    base = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_torch))
    with pytest.raises(UsageError, match="wq"):
        lora_model(base, GRPOConfig(lora_targets=("wq",)))


def test_sequence_logprobs_match_one_at_a_time_and_the_logits(policy):
    import torch

    from frognano.training.torch_grpo import sequence_logprobs

    samples = [sample(completion=GOOD), Sample(prompt_ids=[1, 40], completion_ids=[50, 51, 52, 53, 54, 55],
                                               mask=[1] * 6, logprobs=[0.0] * 6, reward=0.0, group=0)]
    with torch.no_grad():
        batched = sequence_logprobs(policy, samples)
        alone = [sequence_logprobs(policy, [s])[0] for s in samples]
        ids = torch.tensor([samples[0].prompt_ids + samples[0].completion_ids])
        logits = policy(input_ids=ids).logits[0].double() / 0.5
        hot = sequence_logprobs(policy, samples[:1], temperature=0.5)[0]
    assert [len(t) for t in batched] == [4, 6]
    for b, a in zip(batched, alone):  # right padding changes nothing
        assert torch.allclose(b, a, atol=1e-5)
    p = len(samples[0].prompt_ids)
    for k, token in enumerate(GOOD):  # position p - 1 + k predicts completion token k, at the temperature
        want = renormalised_logprob(logits[p - 1 + k].tolist(), None, token, 1.0)
        assert float(hot[k]) == pytest.approx(want, abs=1e-5)


def test_grpo_loss_normalisations_exact_on_policy(policy):
    """On-policy every ratio is 1, so the loss is -sum(A * trained tokens) / the normaliser."""
    from frognano.training.torch_grpo import grpo_loss

    # 3 trained tokens (one environment token), and 2 trained tokens
    samples = on_policy(policy, [(GOOD, [1, 1, 0, 1], 1.0, 0, {}), (BAD, [1, 0, 0, 1], 0.0, 0, {})])
    adv = [0.5, -0.5]
    cases = {
        "dapo": -(0.5 * 3 - 0.5 * 2) / 5,
        "grpo": -(0.5 * 3 / 3 - 0.5 * 2 / 2) / 2,
        "dr_grpo": -(0.5 * 3 - 0.5 * 2) / (10 * 2),
    }
    for loss_type, want in cases.items():
        loss, stats = grpo_loss(policy, samples, adv, GRPOConfig(loss_type=loss_type, max_completion_length=10))
        assert loss.item() == pytest.approx(want, abs=1e-6), loss_type
        assert stats["tokens"] == 5
        assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
        assert stats["clip_low_fraction"] == stats["clip_high_fraction"] == 0.0
    with pytest.raises(UsageError, match="max_completion_length"):
        grpo_loss(policy, samples, adv, GRPOConfig(loss_type="dr_grpo", max_completion_length=3))


def test_grpo_loss_clips_above_and_below(policy):
    """A ratio of e (old logprob one nat lower) with a positive advantage is clipped at
    1 + epsilon_high; a ratio of 1/e with a negative advantage at 1 - epsilon."""
    from frognano.training.torch_grpo import grpo_loss

    up, down = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    up.logprobs = [x - 1.0 for x in up.logprobs]
    down.logprobs = [x + 1.0 for x in down.logprobs]
    config = GRPOConfig()
    loss, stats = grpo_loss(policy, [up], [1.0], config)
    assert loss.item() == pytest.approx(-(1 + 0.28), abs=1e-5)
    assert stats["clip_high_fraction"] == 1.0
    loss.backward()
    assert all(p.grad is None or float(p.grad.abs().max()) == 0.0 for p in policy.parameters() if p.requires_grad)
    loss, stats = grpo_loss(policy, [down], [-1.0], config)
    assert loss.item() == pytest.approx(1 - 0.2, abs=1e-5)
    assert stats["clip_low_fraction"] == 1.0


def test_grpo_loss_kl_to_the_disabled_adapters(policy):
    """LoRA starts as the identity (B = 0): the KL to the reference is 0 and beta changes nothing."""
    from frognano.training.torch_grpo import grpo_loss

    samples = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    plain, _ = grpo_loss(policy, samples, [0.5, -0.5], GRPOConfig())
    with_kl, stats = grpo_loss(policy, samples, [0.5, -0.5], GRPOConfig(beta=0.1))
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    assert with_kl.item() == pytest.approx(plain.item(), abs=1e-6)


def test_grpo_step_raises_the_rewarded_completion(policy):
    """One step (lr 1e-2, deterministic: seeded LoRA init, one forward on CPU) changes the LoRA
    weights and moves log p(GOOD) - log p(BAD) up: GOOD earned reward 1, BAD 0, same prompt."""
    import torch

    from frognano.training.torch_grpo import grpo_step, make_optimizer, sequence_logprobs

    config = GRPOConfig(learning_rate=1e-2)
    samples = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    before_lora = lora_state(policy)
    with torch.no_grad():
        before = [float(t.sum()) for t in sequence_logprobs(policy, samples)]
    stats = grpo_step(policy, make_optimizer(policy, config), samples, config)
    with torch.no_grad():
        after = [float(t.sum()) for t in sequence_logprobs(policy, samples)]
    assert stats["stepped"] == 1.0 and stats["kept_groups"] == 1.0 and stats["dropped_groups"] == 0.0
    assert stats["grad_norm"] > 0 and math.isfinite(stats["loss"])
    assert any(not torch.equal(before_lora[n], p) for n, p in lora_state(policy).items())
    assert after[0] - after[1] > before[0] - before[1]
    assert after[0] > before[0]


def test_lora_on_the_output_layer(tiny_torch, tmp_path):
    """``lm_head`` as a LoRA target (the tiny preset's): refused where the output layer is the
    input embeddings (merging would change both); on a model with its own, one step moves its
    adapter and raises the rewarded completion, and the merged model computes the same logits
    with the embeddings untouched."""
    import torch

    transformers = pytest.importorskip("transformers")
    from frognano.runtime.tiny import build_tiny
    from frognano.training.torch_grpo import grpo_step, lora_model, make_optimizer, sequence_logprobs

    config = GRPOConfig(learning_rate=1e-2, lora_targets=GRPOConfig().lora_targets + ("lm_head",))
    with pytest.raises(UsageError, match="ties"):
        lora_model(transformers.AutoModelForCausalLM.from_pretrained(str(tiny_torch)), config)
    folder = build_tiny(tmp_path / "untied", "torch", tie_word_embeddings=False)
    torch.manual_seed(0)
    model = lora_model(transformers.AutoModelForCausalLM.from_pretrained(str(folder)), config)
    head = {n: p.detach().clone() for n, p in model.named_parameters() if "lm_head.lora_" in n}
    assert head and all(p.requires_grad for n, p in model.named_parameters() if n in head)
    samples = on_policy(model, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    with torch.no_grad():
        before = [float(t.sum()) for t in sequence_logprobs(model, samples)]
    grpo_step(model, make_optimizer(model, config), samples, config)
    with torch.no_grad():
        after = [float(t.sum()) for t in sequence_logprobs(model, samples)]
        ids = torch.tensor([PROMPT + GOOD])
        adapted = model(input_ids=ids).logits
    assert any(not torch.equal(head[n], p) for n, p in model.named_parameters() if n in head)
    assert after[0] - after[1] > before[0] - before[1]
    merged = model.merge_and_unload()
    base = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, adapted, atol=1e-5)
    assert torch.equal(merged.model.embed_tokens.weight, base.model.embed_tokens.weight)
    assert not torch.equal(merged.lm_head.weight, base.lm_head.weight)


def test_grpo_step_skips_groups_without_signal(policy):
    from frognano.training.torch_grpo import grpo_step, make_optimizer

    config = GRPOConfig(learning_rate=1e-2)
    samples = on_policy(policy, [
        (GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 1.0, 0, {}),                 # equal rewards
        (GOOD, [1] * 4, 1.0, 1, {}), (BAD, [1] * 4, 0.0, 1, {"error": True}),    # one clean sample
        (GOOD, [1] * 4, 1.0, 2, {"truncated": True}), (BAD, [1] * 4, 0.0, 2, {"truncated": True}),
    ])
    before = lora_state(policy)
    stats = grpo_step(policy, make_optimizer(policy, config), samples, config)
    assert stats["stepped"] == 0.0
    assert (stats["kept_groups"], stats["dropped_groups"], stats["errors"]) == (1.0, 2.0, 1.0)
    assert "zero_variance_fraction" not in stats  # the loop counts it, over every group of a step
    assert all(lora_state(policy)[n].equal(p) for n, p in before.items())


def test_grpo_step_refuses_a_nan_loss_without_stepping(policy):
    from frognano.training.torch_grpo import grpo_step, make_optimizer

    config = GRPOConfig(learning_rate=1e-2)
    samples = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    samples[0].logprobs[1] = math.nan  # a broken backend's record
    before = lora_state(policy)
    optimizer = make_optimizer(policy, config)
    with pytest.raises(NonFiniteLossError, match="no step was taken"):
        grpo_step(policy, optimizer, samples, config)
    assert all(lora_state(policy)[n].equal(p) for n, p in before.items())
    assert all(p.grad is None for p in policy.parameters())
