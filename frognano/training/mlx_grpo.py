"""GRPO on MLX, with mlx-lm's LoRA adapters on an mlx-lm causal LM: retraining on a Mac.

The MLX twin of ``torch_grpo.py``: the same ``GRPOConfig``, ``Sample`` and pure pieces of
``grpo.py``, so both backends train the variant ``grpo.py`` names, rule by rule.  MLX's own
parts: the reference for ``beta > 0`` is every adapter's scale set to 0 for the reference
forward pass (exactly the frozen base layer); AdamW with bias correction on (MLX's default is
off), as torch's; and on the same float32 weights the log-probabilities agree with
``torch_grpo.sequence_logprobs`` to ~1e-6.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from ..runtime.mlx_cpu import use_fast_blas

use_fast_blas()  # before mlx's first import (runtime/mlx_cpu.py)

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx.optimizers as optim  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from ..errors import UsageError  # noqa: E402
from .grpo import GRPOConfig, NonFiniteLossError, Sample, assemble, check_loss_inputs, loss_mask  # noqa: E402

__all__ = ["grpo_loss", "grpo_step", "lora_adapters", "lora_model", "make_optimizer", "sequence_logprobs"]


def lora_model(model: nn.Module, config: GRPOConfig) -> nn.Module:
    """``model``, frozen, with LoRA adapters (rank ``lora_rank``, scale ``lora_alpha / lora_rank``,
    dropout 0) on the modules of every transformer block named in ``lora_targets`` (and on the
    output layer for ``lm_head``, where the model has its own); only the adapters train.  Changed in place (mlx-lm's way) and returned.

    mlx-lm's ``linear_to_lora_layers`` takes the targets as paths inside a block
    (``self_attn.q_proj``); they are found here from the bare names, so the same
    ``GRPOConfig`` serves both backends.  Dropout is 0 so that a training forward pass is the
    function the sampler ran (ratio exactly 1 on-policy).  ``UsageError`` when a target names no
    module of the model's blocks.
    """
    from mlx_lm.tuner.utils import linear_to_lora_layers

    layers = getattr(model, "layers", None)
    if not layers:
        raise UsageError(f"{type(model).__name__} has no transformer blocks (.layers): not an mlx-lm model")
    in_blocks = [t for t in config.lora_targets if t != "lm_head"]
    keys = {path for path, _ in layers[0].named_modules() if path.rsplit(".", 1)[-1] in in_blocks}
    missing = [t for t in in_blocks if not any(k.rsplit(".", 1)[-1] == t for k in keys)]
    if missing:
        raise UsageError(f"lora_targets {missing} name no module of {type(model).__name__}")
    head = getattr(model, "lm_head", None) if "lm_head" in config.lora_targets else None
    if "lm_head" in config.lora_targets and not isinstance(head, (nn.Linear, nn.QuantizedLinear)):
        # mlx-lm's tied models compute the logits with the input embeddings (no lm_head).
        raise UsageError("lora_targets names lm_head, but this model ties its output layer to its input "
                         "embeddings: leave lm_head out (or use a model with its own output layer)")
    model.freeze()
    scale = config.lora_alpha / config.lora_rank
    if keys:
        linear_to_lora_layers(model, len(layers), {"rank": config.lora_rank, "scale": scale, "dropout": 0.0,
                                                   "keys": sorted(keys)})
    if head is not None:
        # The output layer sits outside the blocks that linear_to_lora_layers walks.
        from mlx_lm.tuner.lora import LoRALinear

        model.lm_head = LoRALinear.from_base(head, r=config.lora_rank, dropout=0.0, scale=scale)
    return model


def make_optimizer(model: nn.Module, config: GRPOConfig) -> optim.Optimizer:
    """AdamW at ``learning_rate`` for the trainable (LoRA) parameters.  No weight decay, so the
    only pull back toward the base model is the explicit ``beta`` term; bias correction on (MLX's
    default is off), so the first steps are the size torch's AdamW takes."""
    if not tree_flatten(model.trainable_parameters()):
        raise UsageError("the model has no trainable parameters (wrap it with lora_model first)")
    return optim.AdamW(learning_rate=config.learning_rate, weight_decay=0.0, bias_correction=True)


def sequence_logprobs(model: nn.Module, samples: list[Sample], *, temperature: float = 1.0) -> list[mx.array]:
    """Per completion token, log p(token | everything before it) under ``model``: one teacher-
    forced forward pass over prompt + completion (right-padded into one batch), a 1-D float32
    array per sample, one entry per completion token (environment tokens included; the loss
    mask drops them), differentiable.

    ``temperature`` divides the logits (the trainer passes the sampler's, so the ratio compares
    the policy with the distribution the episode was drawn from); where ``Sample.allowed``
    records the grammar's mask, the log-probabilities are renormalised over the allowed tokens.
    """
    if not samples:
        return []
    table = _token_logprobs(model, samples, temperature)
    return [table[i, : len(s.completion_ids)] for i, s in enumerate(samples)]


def _token_logprobs(model: nn.Module, samples: list[Sample], temperature: float) -> mx.array:
    """``sequence_logprobs`` as one (samples x longest completion) float32 matrix, 0 past each
    sample's completion: the loss works on the whole batch at once rather than per sample."""
    if not temperature > 0:
        raise UsageError(f"temperature must be positive, got {temperature}")
    seqs = [s.prompt_ids + s.completion_ids for s in samples]
    width = max(len(q) for q in seqs)
    longest = max(len(s.completion_ids) for s in samples)
    if longest == 0:  # nothing to score (and mx.logsumexp refuses an empty axis)
        return mx.zeros((len(samples), 0), dtype=mx.float32)
    ids = np.zeros((len(seqs), width), dtype=np.int32)
    # Which logits row predicts completion token k of sample i (row p - 1 + k), and that token;
    # past the completion: row 0 and token 0, scored and then ignored.
    rows = np.zeros((len(seqs), longest), dtype=np.int32)
    targets = np.zeros((len(seqs), longest), dtype=np.int32)
    for i, (q, s) in enumerate(zip(seqs, samples)):
        ids[i, : len(q)] = q
        p, c = len(s.prompt_ids), len(s.completion_ids)
        rows[i, :c] = np.arange(p - 1, p - 1 + c)
        targets[i, :c] = s.completion_ids
    # Right padding and no attention mask: mlx-lm's causal mask keeps every real token from
    # seeing the pads after it, so the batch scores each sequence as it would score it alone.
    logits = model(mx.array(ids))
    picked = logits[mx.arange(len(seqs))[:, None], mx.array(rows)]  # (samples, longest, vocabulary)
    # float32 before the softmax: float16 log-probabilities are too coarse for a ratio near 1.
    picked = picked.astype(mx.float32) / temperature
    allowed = _allowed_matrix(samples, longest, picked.shape[-1])
    if allowed is not None:
        picked = mx.where(mx.array(allowed), picked, -mx.inf)
    chosen = mx.take_along_axis(picked, mx.array(targets)[..., None], axis=-1).squeeze(-1)
    out = chosen - mx.logsumexp(picked, axis=-1)
    lengths = np.array([len(s.completion_ids) for s in samples])
    return mx.where(mx.array(np.arange(longest)[None, :] < lengths[:, None]), out, 0.0)


def _allowed_matrix(samples: list[Sample], longest: int, vocab: int) -> np.ndarray | None:
    """``Sample.allowed`` of the batch as a bool array (samples x longest x vocabulary), True
    where allowed; None when no sample restricted any token (the common, cheap case)."""
    if not any(s.allowed is not None and any(a is not None for a in s.allowed) for s in samples):
        return None
    out = np.ones((len(samples), longest, vocab), dtype=bool)
    for i, s in enumerate(samples):
        for t, packed in enumerate(s.allowed or ()):
            if packed is not None:
                bits = np.unpackbits(np.frombuffer(packed, dtype=np.uint8), bitorder="little")[:vocab]
                out[i, t, : len(bits)] = bits.astype(bool)
                out[i, t, len(bits):] = False
    return out


def lora_adapters(model: nn.Module) -> list[nn.Module]:
    """The model's LoRA adapter modules (mlx-lm's LoRA layer types)."""
    from mlx_lm.tuner.lora import LoRAEmbedding, LoRALinear, LoRASwitchLinear

    return [m for _, m in model.named_modules() if isinstance(m, (LoRALinear, LoRASwitchLinear, LoRAEmbedding))]


@contextmanager
def _adapters_disabled(adapters: list[nn.Module]) -> Iterator[None]:
    """The base model, for the KL reference: each adapter's output is scaled by 0.  MLX builds
    its graph eagerly, so the 0 is captured when the forward pass runs and restoring the scale
    afterwards leaves that pass untouched."""
    scales = [m.scale for m in adapters]
    try:
        for m in adapters:
            m.scale = 0.0
        yield
    finally:
        for m, scale in zip(adapters, scales):
            m.scale = scale


def _loss_terms(model: nn.Module, samples: list[Sample], advantages: list[float],
                config: GRPOConfig) -> tuple[mx.array, dict[str, mx.array]]:
    """``grpo_loss`` with its statistics still as (lazy) arrays: the function ``grpo_step``
    differentiates (``mx.value_and_grad`` takes the first output, the rest rides along)."""
    check_loss_inputs(samples, advantages, config)
    adapters = lora_adapters(model) if config.beta > 0 else []
    if config.beta > 0 and not adapters:
        raise UsageError(f"beta {config.beta} needs a reference model: wrap the model with lora_model, "
                         "whose disabled adapters are the reference")
    new = _token_logprobs(model, samples, config.temperature)
    width = new.shape[1]
    mask_np = np.zeros((len(samples), width), dtype=np.float32)
    old_np = np.zeros((len(samples), width), dtype=np.float32)
    for i, s in enumerate(samples):
        mask_np[i, : len(s.mask)] = loss_mask(s, mask_truncated=config.mask_truncated)
        old_np[i, : len(s.logprobs)] = s.logprobs
    mask, old = mx.array(mask_np), mx.array(old_np)
    adv = mx.array(np.asarray(advantages, dtype=np.float32))[:, None]
    trained = mask > 0

    # Untrained positions get log-ratio 0 via where (not a product), so a NaN or huge value
    # recorded for an environment token cannot leak into the loss or the gradient.
    ratio = mx.exp(mx.where(trained, new - old, 0.0))
    clipped = mx.clip(ratio, 1 - config.epsilon, 1 + config.epsilon_high)
    per_token = -mx.minimum(ratio * adv, clipped * adv)
    stats: dict[str, mx.array] = {}
    if adapters:
        with _adapters_disabled(adapters):
            ref = mx.stop_gradient(_token_logprobs(model, samples, config.temperature))
        d = mx.where(trained, ref - new, 0.0)
        kl = mx.exp(d) - d - 1
        per_token = per_token + config.beta * kl
        stats["kl"] = mx.stop_gradient((kl * mask).sum())

    sums = (per_token * mask).sum(axis=1)
    counts = mask.sum(axis=1)
    tokens = float(mask_np.sum())
    if config.loss_type == "dapo":
        loss = sums.sum() / max(tokens, 1.0)
    elif config.loss_type == "dr_grpo":
        loss = sums.sum() / (config.max_completion_length * len(samples))
    else:  # "grpo": an episode with no trained token still counts in the mean (as TRL's clamp(min=1))
        loss = (sums / mx.maximum(counts, 1.0)).mean()

    r = mx.stop_gradient(ratio)
    stats["ratio_sum"] = (r * mask).sum()
    # Where the clip took the gradient away, as TRL counts it: below 1 - epsilon with a negative
    # advantage, above 1 + epsilon_high with a positive one.
    stats["clip_low"] = (((r < 1 - config.epsilon) & (adv < 0)) * mask).sum()
    stats["clip_high"] = (((r > 1 + config.epsilon_high) & (adv > 0)) * mask).sum()
    stats["tokens"] = mx.array(tokens)
    return loss, stats


def _float_stats(stats: dict[str, mx.array]) -> dict[str, float]:
    """``_loss_terms``'s sums as torch_grpo's statistics: shares of the trained tokens."""
    tokens = float(stats["tokens"].item())
    denominator = max(tokens, 1.0)
    out = {"tokens": tokens, "ratio_mean": float(stats["ratio_sum"].item()) / denominator,
           "clip_low_fraction": float(stats["clip_low"].item()) / denominator,
           "clip_high_fraction": float(stats["clip_high"].item()) / denominator}
    if "kl" in stats:
        out["kl"] = float(stats["kl"].item()) / denominator
    return out


def grpo_loss(model: nn.Module, samples: list[Sample], advantages: list[float],
              config: GRPOConfig) -> tuple[mx.array, dict[str, float]]:
    """The clipped-surrogate loss of ``samples`` (one advantage each; a scalar array) and its
    statistics: ``tokens`` (trained tokens), ``ratio_mean``, ``clip_low_fraction`` /
    ``clip_high_fraction`` (share of trained tokens where the clip took the gradient away),
    ``kl`` (mean k3 estimate, only when beta > 0).  To differentiate, ``grpo_step`` uses the
    same computation under ``mlx.nn.value_and_grad``."""
    loss, stats = _loss_terms(model, samples, advantages, config)
    mx.eval(loss, stats)
    return loss, _float_stats(stats)


def grpo_step(model: nn.Module, optimizer: optim.Optimizer, samples: list[Sample],
              config: GRPOConfig) -> dict[str, float]:
    """One GRPO update from a batch of episodes (several groups): filter, advantages, loss and
    gradient, clip, step.

    Returns the keys torch_grpo's ``grpo_step`` returns: ``loss``, ``grad_norm`` (before
    clipping), ``kept_groups``, ``dropped_groups``, ``errors``,
    ``reward_mean``, ``samples``, ``tokens``, ``stepped`` and ``grpo_loss``'s stats.  Nothing is
    stepped when no group carries a gradient or no token is trained (Adam's momentum would
    otherwise move the weights on a zero gradient).  A NaN or infinite loss or gradient raises
    ``NonFiniteLossError`` with the weights and the optimiser state untouched.
    """
    batch, advantages, stats = assemble(samples, config)
    if not any(any(loss_mask(s, mask_truncated=config.mask_truncated)) for s in batch):
        return stats

    loss_and_grad = nn.value_and_grad(model, lambda: _loss_terms(model, batch, advantages, config))
    (loss, loss_stats), grads = loss_and_grad()
    mx.eval(loss, loss_stats)
    stats.update(_float_stats(loss_stats))
    value = float(loss.item())
    if not math.isfinite(value):
        raise NonFiniteLossError(f"the GRPO loss is {value} on {len(batch)} episodes (check the episodes' "
                                 "logprobs and rewards); no step was taken")
    # max_norm inf still returns the norm, and scales by min(1, inf) = 1: no clipping.
    grads, norm_array = optim.clip_grad_norm(grads, config.max_grad_norm or math.inf)
    norm = float(norm_array.item())
    if not math.isfinite(norm):
        raise NonFiniteLossError(f"the gradient norm is {norm} (loss {value}); no step was taken")
    optimizer.update(model, grads)
    mx.eval(model.parameters(), optimizer.state)
    stats.update(loss=value, grad_norm=norm, stepped=1.0)
    return stats


