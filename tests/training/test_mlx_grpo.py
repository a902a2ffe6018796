"""The MLX trainer (``training/mlx_grpo.py``) on the tiny model: LoRA, log-probabilities (against
``grpo.renormalised_logprob`` and against the torch trainer on the same weights), the loss by
hand, and the step.

The step and loss tests use the float16 MLX folder, as converted MLX models usually are; the
exact comparisons use the float32 torch folder, which mlx-lm loads too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from frognano.errors import UsageError
from frognano.training.grpo import GRPOConfig, NonFiniteLossError, Sample, renormalised_logprob

mx = pytest.importorskip("mlx.core")
mlx_lm = pytest.importorskip("mlx_lm")
nn = pytest.importorskip("mlx.nn")
optim = pytest.importorskip("mlx.optimizers")
from mlx.utils import tree_flatten  # noqa: E402

from frognano.training.mlx_grpo import (  # noqa: E402
    grpo_loss, grpo_step, lora_model, make_optimizer, sequence_logprobs,
)

PROMPT = [1, 40, 41, 42, 43]
GOOD = [60, 61, 62, 63]
BAD = [70, 71, 72, 73]


def load(folder) -> nn.Module:
    model, _ = mlx_lm.load(str(folder))
    return model


@pytest.fixture
def policy(tiny_mlx):
    """A fresh LoRA-wrapped tiny Qwen3 (float16 weights; training changes it), seeded LoRA init."""
    mx.random.seed(0)
    return lora_model(load(tiny_mlx), GRPOConfig())


@pytest.fixture
def policy32(tiny_torch):
    """The same architecture on float32 weights (the torch folder), LoRA-wrapped."""
    mx.random.seed(0)
    return lora_model(load(tiny_torch), GRPOConfig())


def make(completion, mask=None, reward=0.0, group=0, prompt=PROMPT, **kw) -> Sample:
    mask = [1] * len(completion) if mask is None else list(mask)
    return Sample(prompt_ids=list(prompt), completion_ids=list(completion), mask=mask,
                  logprobs=[0.0] * len(completion), reward=reward, group=group, **kw)


def on_policy(model, specs, temperature: float = 1.0) -> list[Sample]:
    """Samples whose logprobs are the model's own (as if just sampled from it): ratio 1."""
    drafts = [make(c, m, r, g, **kw) for c, m, r, g, kw in specs]
    for s, lp in zip(drafts, sequence_logprobs(model, drafts, temperature=temperature)):
        s.logprobs = [float(x) if m else 0.0 for x, m in zip(lp.tolist(), s.mask)]
    return drafts


def params(model, lora: bool) -> dict[str, np.ndarray]:
    """A copy of the model's LoRA (or base) weights, by name."""
    return {n: np.array(p.astype(mx.float32)) for n, p in tree_flatten(model.parameters())
            if ("lora_" in n) == lora}


def unchanged(before: dict, after: dict) -> bool:
    return before.keys() == after.keys() and all(np.array_equal(before[n], after[n]) for n in before)


def untouched(optimizer) -> bool:
    """No update ran: step 0 and no per-parameter moments (MLX creates them on the first update)."""
    return optimizer.step.item() == 0 and set(optimizer.state) == {"step", "learning_rate"}


def packed(allowed: set[int], vocab: int) -> bytes:
    bits = np.zeros(vocab, dtype=np.uint8)
    bits[sorted(allowed)] = 1
    return np.packbits(bits, bitorder="little").tobytes()


# --------------------------------------------------------------------------------------------
# LoRA
# --------------------------------------------------------------------------------------------


def test_lora_model_trains_only_the_attention_adapters(policy, tiny_mlx):
    trainable = [n for n, _ in tree_flatten(policy.trainable_parameters())]
    assert trainable and all(n.rsplit(".", 1)[-1] in ("lora_a", "lora_b") for n in trainable)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert sum(f"self_attn.{proj}." in n for n in trainable) == 2 * 2  # a and b, in both blocks
    assert not any("mlp" in n or "embed" in n for n in trainable)
    lora = next(m for n, m in policy.named_modules() if n.endswith("layers.0.self_attn.q_proj"))
    assert lora.scale == 16.0 / 8 and lora.lora_a.shape[-1] == 8
    with pytest.raises(UsageError, match="wq"):
        lora_model(load(tiny_mlx), GRPOConfig(lora_targets=("wq",)))


def test_make_optimizer_needs_trainable_weights(tiny_mlx):
    model = load(tiny_mlx)
    model.freeze()
    with pytest.raises(UsageError, match="no trainable parameters"):
        make_optimizer(model, GRPOConfig())


# --------------------------------------------------------------------------------------------
# Log-probabilities
# --------------------------------------------------------------------------------------------


def test_sequence_logprobs_match_one_at_a_time_and_the_logits(policy32):
    samples = [make(GOOD), make([50, 51, 52, 53, 54, 55], prompt=[1, 40])]
    batched = sequence_logprobs(policy32, samples)
    alone = [sequence_logprobs(policy32, [s])[0] for s in samples]
    assert [b.shape for b in batched] == [(4,), (6,)]
    assert all(b.dtype == mx.float32 for b in batched)
    for b, a in zip(batched, alone):  # right padding changes nothing
        assert np.allclose(np.array(b), np.array(a), atol=1e-5)
    logits = np.array(policy32(mx.array([PROMPT + GOOD]))[0], dtype=np.float64)
    hot = sequence_logprobs(policy32, samples[:1], temperature=0.5)[0].tolist()
    p = len(PROMPT)
    for k, token in enumerate(GOOD):  # position p - 1 + k predicts completion token k, at the temperature
        assert hot[k] == pytest.approx(renormalised_logprob(logits[p - 1 + k].tolist(), None, token, 0.5), abs=1e-5)
    assert sequence_logprobs(policy32, []) == []
    with pytest.raises(UsageError, match="temperature"):
        sequence_logprobs(policy32, samples, temperature=0.0)


def test_sequence_logprobs_renormalise_over_the_allowed_tokens(policy32):
    """Each step's grammar mask (packed bits, None for no restriction) renormalises the softmax
    exactly as ``renormalised_logprob`` does; a token outside the mask gets -inf."""
    vocab = int(policy32.args.vocab_size)
    steps = [{60, 7, 300}, None, {62, 63}, {1, 2, 3}]  # the last forbids the token that follows
    s = make(GOOD, allowed=[None if a is None else packed(a, vocab) for a in steps])
    other = make(BAD, prompt=[1, 40])  # unrestricted, in the same batch
    got, plain = sequence_logprobs(policy32, [s, other], temperature=0.7)
    logits = np.array(policy32(mx.array([PROMPT + GOOD]))[0], dtype=np.float64)
    p = len(PROMPT)
    for k, (token, allowed) in enumerate(zip(GOOD, steps)):
        want = renormalised_logprob(logits[p - 1 + k].tolist(), allowed, token, 0.7)
        if math.isinf(want):
            assert got[k].item() == -math.inf
        else:
            assert got[k].item() == pytest.approx(want, abs=1e-5)
    unrestricted = sequence_logprobs(policy32, [make(GOOD)], temperature=0.7)[0]
    assert got[0].item() > unrestricted[0].item()  # renormalised over 3 tokens, not 512
    assert got[1].item() == pytest.approx(unrestricted[1].item(), abs=1e-6)  # None: no restriction
    alone = sequence_logprobs(policy32, [other], temperature=0.7)[0]
    assert np.allclose(np.array(plain), np.array(alone), atol=1e-5)


def test_sequence_logprobs_agree_with_torch_on_the_same_weights(policy32, tiny_torch):
    """The float32 tiny folder in both backends: the MLX and torch trainers score the same
    episodes alike (LoRA starts as the identity, B = 0), masks and temperature included."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from frognano.training import torch_grpo

    reference = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_torch), dtype=torch.float32)
    vocab = int(policy32.args.vocab_size)
    samples = [make(GOOD), make([50, 51, 52, 53, 54, 55], prompt=[1, 40]),
               make(BAD, allowed=[packed({70, 80, 90}, vocab), None, packed({72, 5}, vocab), None])]
    for temperature in (1.0, 0.6):
        ours = sequence_logprobs(policy32, samples, temperature=temperature)
        with torch.no_grad():
            theirs = torch_grpo.sequence_logprobs(reference, samples, temperature=temperature)
        for a, b in zip(ours, theirs):
            assert np.allclose(np.array(a), b.numpy(), atol=1e-4), (np.array(a), b.numpy())


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------


def test_grpo_loss_normalisations_exact_on_policy(policy):
    """On-policy every ratio is 1, so the loss is -sum(A * trained tokens) / the normaliser."""
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
        assert "kl" not in stats
    with pytest.raises(UsageError, match="max_completion_length"):
        grpo_loss(policy, samples, adv, GRPOConfig(loss_type="dr_grpo", max_completion_length=3))
    with pytest.raises(UsageError, match="2 samples but 1 advantages"):
        grpo_loss(policy, samples, adv[:1], GRPOConfig())


def test_grpo_loss_environment_tokens_cannot_leak(policy):
    """A NaN recorded for an environment token (mask 0) changes neither the loss nor its gradient."""
    clean = on_policy(policy, [(GOOD, [1, 1, 0, 1], 1.0, 0, {}), (BAD, [1, 1, 1, 1], 0.0, 0, {})])
    dirty = on_policy(policy, [(GOOD, [1, 1, 0, 1], 1.0, 0, {}), (BAD, [1, 1, 1, 1], 0.0, 0, {})])
    dirty[0].logprobs[2] = math.nan
    config = GRPOConfig()
    grads = []
    for batch in (clean, dirty):
        loss_and_grad = nn.value_and_grad(policy, lambda: grpo_loss(policy, batch, [0.5, -0.5], config)[0])
        loss, g = loss_and_grad()
        assert math.isfinite(loss.item())
        grads.append(dict(tree_flatten(g)))
    assert all(np.array_equal(np.array(grads[0][n]), np.array(grads[1][n])) for n in grads[0])


def test_grpo_loss_clips_above_and_below(policy):
    """A ratio of e (old logprob one nat lower) with a positive advantage is clipped at
    1 + epsilon_high, and its gradient is zero; a ratio of 1/e with a negative advantage at
    1 - epsilon."""
    up, down = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    up.logprobs = [x - 1.0 for x in up.logprobs]
    down.logprobs = [x + 1.0 for x in down.logprobs]
    config = GRPOConfig()
    loss, stats = grpo_loss(policy, [up], [1.0], config)
    assert loss.item() == pytest.approx(-(1 + 0.28), abs=1e-5)
    assert stats["clip_high_fraction"] == 1.0 and stats["clip_low_fraction"] == 0.0
    assert stats["ratio_mean"] == pytest.approx(math.e, rel=1e-4)
    _, grads = nn.value_and_grad(policy, lambda: grpo_loss(policy, [up], [1.0], config)[0])()
    assert all(float(mx.abs(g).max().item()) == 0.0 for _, g in tree_flatten(grads))
    loss, stats = grpo_loss(policy, [down], [-1.0], config)
    assert loss.item() == pytest.approx(1 - 0.2, abs=1e-5)
    assert stats["clip_low_fraction"] == 1.0 and stats["clip_high_fraction"] == 0.0


def test_grpo_loss_kl_to_the_disabled_adapters(policy, tiny_mlx):
    """LoRA starts as the identity (B = 0): the KL to the reference is 0 and beta changes nothing.
    After a step, the KL is the k3 estimate against the base model (a fresh load of the same
    folder), and the adapters are back on afterwards."""
    samples = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    plain, _ = grpo_loss(policy, samples, [0.5, -0.5], GRPOConfig())
    with_kl, stats = grpo_loss(policy, samples, [0.5, -0.5], GRPOConfig(beta=0.1))
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    assert with_kl.item() == pytest.approx(plain.item(), abs=1e-6)

    config = GRPOConfig(learning_rate=1e-2)
    grpo_step(policy, make_optimizer(policy, config), samples, config)
    new = np.concatenate([np.array(t, dtype=np.float64) for t in sequence_logprobs(policy, samples)])
    ref = np.concatenate([np.array(t, dtype=np.float64) for t in sequence_logprobs(load(tiny_mlx), samples)])
    d = ref - new
    want = float(np.mean(np.exp(d) - d - 1))
    _, stats = grpo_loss(policy, samples, [0.5, -0.5], GRPOConfig(beta=0.1))
    assert want > 1e-4 and stats["kl"] == pytest.approx(want, rel=1e-3, abs=1e-6)
    again = np.concatenate([np.array(t, dtype=np.float64) for t in sequence_logprobs(policy, samples)])
    assert np.array_equal(again, new)  # the reference pass left the adapters on

    with pytest.raises(UsageError, match="wrap the model with lora_model"):
        grpo_loss(load(tiny_mlx), samples, [0.5, -0.5], GRPOConfig(beta=0.1))


# --------------------------------------------------------------------------------------------
# Step
# --------------------------------------------------------------------------------------------


def test_grpo_step_raises_the_rewarded_completion(policy):
    """One step (lr 1e-2, seeded LoRA init) changes the LoRA weights and nothing else, and moves
    log p(GOOD) - log p(BAD) up: GOOD earned reward 1, BAD 0, same prompt."""
    config = GRPOConfig(learning_rate=1e-2)
    samples = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    lora_before, base_before = params(policy, lora=True), params(policy, lora=False)
    before = [t.sum().item() for t in sequence_logprobs(policy, samples)]
    stats = grpo_step(policy, make_optimizer(policy, config), samples, config)
    after = [t.sum().item() for t in sequence_logprobs(policy, samples)]
    assert set(stats) >= {"loss", "grad_norm", "kept_groups", "dropped_groups", "errors",
                          "reward_mean", "samples", "tokens", "stepped"}
    assert stats["stepped"] == 1.0 and stats["kept_groups"] == 1.0 and stats["dropped_groups"] == 0.0
    assert (stats["samples"], stats["tokens"], stats["reward_mean"]) == (2.0, 8.0, 0.5)
    assert stats["grad_norm"] > 0 and stats["loss"] == pytest.approx(0.0, abs=1e-6)  # on-policy, A sums to 0
    assert not unchanged(lora_before, params(policy, lora=True))
    assert unchanged(base_before, params(policy, lora=False))
    assert after[0] - after[1] > before[0] - before[1]
    assert after[0] > before[0]


def test_grpo_step_clips_the_gradient_norm(tiny_mlx):
    """grad_norm is the norm before clipping; the step applies the clipped gradient (seen
    through plain SGD at rate 1, where the update is the gradient), and max_grad_norm 0 clips
    nothing."""
    moved = {}
    for max_grad_norm in (1e-3, 0.0):
        mx.random.seed(0)
        model = lora_model(load(tiny_mlx), GRPOConfig())
        samples = on_policy(model, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
        config = GRPOConfig(max_grad_norm=max_grad_norm)
        before = params(model, lora=True)
        stats = grpo_step(model, optim.SGD(learning_rate=1.0), samples, config)
        after = params(model, lora=True)
        delta = math.sqrt(sum(float(((after[n] - before[n]).astype(np.float64) ** 2).sum()) for n in before))
        moved[max_grad_norm] = (stats["grad_norm"], delta)
    (norm, clipped), (norm_again, unclipped) = moved[1e-3], moved[0.0]
    assert norm == pytest.approx(norm_again, rel=1e-6) and norm > 1e-2
    assert clipped == pytest.approx(1e-3, rel=1e-3)
    assert unclipped == pytest.approx(norm, rel=1e-3)


def test_grpo_step_skips_groups_without_signal(policy):
    config = GRPOConfig(learning_rate=1e-2)
    samples = on_policy(policy, [
        (GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 1.0, 0, {}),                 # equal rewards
        (GOOD, [1] * 4, 1.0, 1, {}), (BAD, [1] * 4, 0.0, 1, {"error": True}),    # one clean sample
        (GOOD, [1] * 4, 1.0, 2, {"truncated": True}), (BAD, [1] * 4, 0.0, 2, {"truncated": True}),
    ])
    before = params(policy, lora=True)
    optimizer = make_optimizer(policy, config)
    stats = grpo_step(policy, optimizer, samples, config)
    assert stats["stepped"] == 0.0 and stats["loss"] == 0.0 and stats["tokens"] == 0.0
    assert (stats["kept_groups"], stats["dropped_groups"], stats["errors"]) == (1.0, 2.0, 1.0)
    assert "zero_variance_fraction" not in stats  # the loop counts it, over every group of a step
    assert unchanged(before, params(policy, lora=True))
    assert untouched(optimizer)  # Adam never saw a (zero) gradient
    nothing = grpo_step(policy, optimizer, samples[:2], config)
    assert (nothing["kept_groups"], nothing["dropped_groups"], nothing["samples"]) == (0.0, 1.0, 0.0)


def test_grpo_step_refuses_a_nan_loss_without_stepping(policy):
    config = GRPOConfig(learning_rate=1e-2)
    samples = on_policy(policy, [(GOOD, [1] * 4, 1.0, 0, {}), (BAD, [1] * 4, 0.0, 0, {})])
    samples[0].logprobs[1] = math.nan  # a broken backend's record, on a trained token
    before = params(policy, lora=True)
    optimizer = make_optimizer(policy, config)
    with pytest.raises(NonFiniteLossError, match="no step was taken"):
        grpo_step(policy, optimizer, samples, config)
    assert unchanged(before, params(policy, lora=True))
    assert untouched(optimizer)
