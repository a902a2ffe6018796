"""GRPO on torch, with LoRA adapters (peft) on a transformers causal LM.

The variant is the one ``grpo.py`` names, rule by rule (Dr. GRPO advantages, DAPO dynamic
sampling, overlong filtering and clip-higher, token-level normalisation, no KL by default,
renormalised constrained log-probabilities); this module computes it with torch.  Torch's own
parts: the reference for ``beta > 0`` is the peft model with its adapters disabled; the
renormalised log-probabilities, recomputed against the recorded ones on the tiny model, agree to
~1e-6; and data-parallel runs sum the ranks' shares of the loss (``grpo_step``'s ``shard``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..errors import UsageError
from .grpo import GRPOConfig, NonFiniteLossError, Sample, assemble, check_loss_inputs, loss_mask

__all__ = ["grpo_loss", "grpo_step", "lora_model", "make_optimizer", "sequence_logprobs"]


def lora_model(model: Any, config: GRPOConfig) -> Any:
    """``model`` wrapped by peft with LoRA adapters (rank ``lora_rank``, scale ``lora_alpha /
    lora_rank``) on the modules named in ``lora_targets``; only the adapters train.

    Dropout is 0 so that a training forward pass is the same function the sampler ran: with
    dropout the ratio of an on-policy token would be noise around 1 and the clip would bite
    at random.  ``UsageError`` when a target module does not exist in ``model``.
    """
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in config.lora_targets if t not in present]
    if missing:
        raise UsageError(f"lora_targets {missing} name no module of {type(model).__name__}")
    if "lm_head" in config.lora_targets and getattr(model.config, "tie_word_embeddings", False):
        # Merging the adapter would then change the input embeddings too.
        raise UsageError("lora_targets names lm_head, but this model ties it to its input embeddings: "
                         "leave lm_head out (or use a model with its own output layer)")
    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=list(config.lora_targets),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def make_optimizer(model: Any, config: GRPOConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable (LoRA) parameters at ``learning_rate``; no weight decay, so the
    only pull back toward the base model is the explicit ``beta`` term."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise UsageError("the model has no trainable parameters (wrap it with lora_model first)")
    return torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)


def sequence_logprobs(model: Any, samples: list[Sample], *, temperature: float = 1.0) -> list[torch.Tensor]:
    """Per completion token, log p(token | everything before it) under ``model``: one teacher-
    forced forward pass over prompt + completion (right-padded into one batch), a 1-D float32
    tensor per sample, one entry per completion token (environment tokens included; the loss
    mask drops them), differentiable.

    Temperature 1 by default because the policy being optimised is the model's own next-token
    distribution, softmax(logits).  An episode drawn at temperature T came from
    softmax(logits / T), and GRPO's ratio must compare the policy with that distribution, so the
    trainer passes ``GRPOConfig.temperature`` (TRL divides by the sampling temperature too).
    Where ``Sample.allowed`` records the grammar's mask, the log-probabilities are renormalised
    over the allowed tokens, as they were when sampled.
    """
    if not samples:
        return []
    if not temperature > 0:
        raise UsageError(f"temperature must be positive, got {temperature}")
    device = next(model.parameters()).device
    seqs = [s.prompt_ids + s.completion_ids for s in samples]
    width = max(len(q) for q in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, q in enumerate(seqs):
        ids[i, : len(q)] = torch.tensor(q, dtype=torch.long)
        attention[i, : len(q)] = 1
    ids, attention = ids.to(device), attention.to(device)
    # Right padding: real tokens keep positions 0..n-1 and a causal model never looks ahead at
    # the pads, so the padded batch scores each sequence exactly as it would score it alone.
    logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits
    out = []
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        # Position t's logits predict token t + 1: the completion is predicted from p - 1 on.
        # float32 before the softmax: bf16 log-probabilities are too coarse for a ratio near 1.
        rows = logits[i, p - 1 : p - 1 + c].float() / temperature
        if s.allowed is not None and any(a is not None for a in s.allowed):
            rows = rows.masked_fill(~_allowed_rows(s.allowed, rows.shape[-1], rows.device), float("-inf"))
        out.append(torch.log_softmax(rows, dim=-1).gather(-1, ids[i, p : p + c, None]).squeeze(-1))
    return out


def _allowed_rows(allowed: list[bytes | None], vocab: int, device: Any) -> torch.Tensor:
    """``Sample.allowed`` as a bool matrix (completion tokens x vocabulary); True where allowed."""
    import numpy as np

    rows = np.ones((len(allowed), vocab), dtype=bool)
    for t, packed in enumerate(allowed):
        if packed is not None:
            bits = np.unpackbits(np.frombuffer(packed, dtype=np.uint8), bitorder="little")[:vocab]
            rows[t, : len(bits)] = bits.astype(bool)
            rows[t, len(bits):] = False
    return torch.from_numpy(rows).to(device)


def grpo_loss(model: Any, samples: list[Sample], advantages: list[float], config: GRPOConfig, *,
              shard: tuple[int, int] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped-surrogate loss of ``samples`` (one advantage each) and its statistics.

    Stats: ``tokens`` (trained tokens), ``ratio_mean``, ``clip_low_fraction`` / ``clip_high_fraction``
    (share of trained tokens where the clip took the gradient away: ratio below 1 - epsilon with
    a negative advantage, above 1 + epsilon_high with a positive one, as TRL counts them), ``kl``
    (mean k3 estimate, only when beta > 0).

    ``shard=(rank, world)`` (data-parallel training, ``distributed.py``): only the episodes j with
    j % world == rank enter the forward pass, but the loss is divided by the whole batch's
    normaliser (its trained tokens, its size), and so are the ratio and clip statistics: the loss,
    its gradient and every statistic summed over the ranks equal the unsharded ones.  An empty
    share gives a zero loss without a graph and zero statistics.
    """
    check_loss_inputs(samples, advantages, config)
    if config.beta > 0 and not hasattr(model, "disable_adapter"):
        raise UsageError(f"beta {config.beta} needs a reference model: wrap the model with lora_model, "
                         "whose disabled adapters are the reference")
    whole_tokens, whole_size = 0.0, len(samples)
    if shard is not None:
        r, w = shard
        whole_tokens = float(sum(sum(loss_mask(s, mask_truncated=config.mask_truncated)) for s in samples))
        mine = [j for j in range(len(samples)) if j % w == r]
        samples, advantages = [samples[j] for j in mine], [advantages[j] for j in mine]
        if not samples:
            zero = {"tokens": 0.0, "ratio_mean": 0.0, "clip_low_fraction": 0.0, "clip_high_fraction": 0.0}
            return torch.zeros((), device=next(model.parameters()).device), \
                {**zero, **({"kl": 0.0} if config.beta > 0 else {})}
    new = sequence_logprobs(model, samples, temperature=config.temperature)
    device = new[0].device
    ref = None
    if config.beta > 0:
        with torch.no_grad(), model.disable_adapter():
            ref = sequence_logprobs(model, samples, temperature=config.temperature)

    sums, counts = [], []
    ratio_sum = clip_low = clip_high = kl_sum = 0.0
    for i, (s, a) in enumerate(zip(samples, advantages)):
        mask = torch.tensor(loss_mask(s, mask_truncated=config.mask_truncated), dtype=torch.float32, device=device)
        old = torch.tensor(s.logprobs, dtype=torch.float32, device=device)
        # Untrained positions get log-ratio 0 via where (not a product), so a NaN or huge value
        # recorded for an environment token cannot leak into the loss or the gradient.
        log_ratio = torch.where(mask > 0, new[i] - old, torch.zeros_like(old))
        ratio = torch.exp(log_ratio)
        clipped = torch.clamp(ratio, 1 - config.epsilon, 1 + config.epsilon_high)
        per_token = -torch.minimum(ratio * a, clipped * a)
        if ref is not None:
            d = torch.where(mask > 0, ref[i] - new[i], torch.zeros_like(old))
            kl = torch.exp(d) - d - 1
            per_token = per_token + config.beta * kl
            kl_sum += float((kl.detach() * mask).sum())
        sums.append((per_token * mask).sum())
        counts.append(mask.sum())
        with torch.no_grad():
            r = ratio.detach()
            ratio_sum += float((r * mask).sum())
            if a < 0:
                clip_low += float(((r < 1 - config.epsilon).float() * mask).sum())
            elif a > 0:
                clip_high += float(((r > 1 + config.epsilon_high).float() * mask).sum())

    tokens = float(sum(float(c) for c in counts))
    total = torch.stack(sums).sum()
    # The normalisers are the whole batch's: a shard's share of them would weight ranks unequally.
    norm_tokens, size = (tokens, len(samples)) if shard is None else (whole_tokens, whole_size)
    if config.loss_type == "dapo":
        loss = total / max(norm_tokens, 1.0)
    elif config.loss_type == "dr_grpo":
        loss = total / (config.max_completion_length * size)
    else:  # "grpo": an episode with no trained token still counts in the mean (as TRL's clamp(min=1))
        per_episode = torch.stack([s / torch.clamp(c, min=1.0) for s, c in zip(sums, counts)])
        loss = per_episode.mean() if shard is None else per_episode.sum() / size
    denominator = max(norm_tokens, 1.0)
    stats = {"tokens": tokens, "ratio_mean": ratio_sum / denominator, "clip_low_fraction": clip_low / denominator,
             "clip_high_fraction": clip_high / denominator}
    if ref is not None:
        stats["kl"] = kl_sum / denominator
    return loss, stats


def grpo_step(model: Any, optimizer: torch.optim.Optimizer, samples: list[Sample], config: GRPOConfig, *,
              shard: tuple[int, int] | None = None,
              all_reduce: Callable[[list[torch.Tensor]], None] | None = None) -> dict[str, float]:
    """One GRPO update from a batch of episodes (several groups): filter, advantages, loss,
    backward, clip, step.

    Returns ``loss``, ``grad_norm`` (before clipping), ``kept_groups``, ``dropped_groups``,
    ``errors``, ``reward_mean`` (clean episodes), ``samples`` (in the loss), ``stepped`` (1.0 or
    0.0) and ``grpo_loss``'s stats (``grpo.assemble``).  Nothing is stepped when no group carries
    a gradient or no token is trained: Adam's momentum would otherwise move the weights on a zero
    gradient.  A NaN or infinite loss or gradient raises ``NonFiniteLossError`` with the weights
    untouched.

    Data-parallel (``distributed.py``): every rank passes the same ``samples``, its ``shard``
    (rank, world) and ``all_reduce`` (sums a list of tensors over the ranks, in place).  Each
    rank backpropagates its share of the loss (``grpo_loss``), then the gradients and the loss
    statistics are summed, so every rank clips and steps the single-process gradient; a rank
    with no episode of its own still takes part, with zero gradients.
    """
    batch, advantages, stats = assemble(samples, config)
    if not any(any(loss_mask(s, mask_truncated=config.mask_truncated)) for s in batch):
        return stats

    optimizer.zero_grad(set_to_none=True)
    params = [p for p in model.parameters() if p.requires_grad]
    if shard is None:
        loss_value = _micro_batched_backward(model, batch, advantages, config, stats)
    else:
        loss, loss_stats = grpo_loss(model, batch, advantages, config, shard=shard)
        loss_value = _sharded_backward(loss, loss_stats, params, all_reduce, stats)
        if not math.isfinite(loss_value):  # the same sum on every rank: all raise together
            optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(f"the GRPO loss is {loss_value} on {len(batch)} episodes of "
                                     f"{int(stats['kept_groups'])} groups (check the episodes' logprobs and "
                                     "rewards); no step was taken")
    # max_norm inf still returns the norm, and scales by min(1, inf) = 1: no clipping.
    norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm or math.inf))
    if not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLossError(f"the gradient norm is {norm} (loss {loss_value}); no step was taken")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stats.update(loss=loss_value, grad_norm=norm, stepped=1.0)
    return stats


def _micro_batched_backward(model: Any, batch: list[Sample], advantages: list[float], config: GRPOConfig,
                            stats: dict[str, float]) -> float:
    """Backpropagate the batch's loss in passes of ``config.micro_batch`` episodes (the
    data-parallel shards' arithmetic: each pass's loss and statistics carry the whole batch's
    normaliser, so their sums are the one-pass loss, gradient and statistics); the loss.  A
    non-finite pass raises before any gradient of it is added, and the gradients added so far
    are dropped."""
    passes = max(1, -(-len(batch) // config.micro_batch))
    total, summed = 0.0, {}
    for k in range(passes):
        loss, loss_stats = grpo_loss(model, batch, advantages, config, shard=(k, passes) if passes > 1 else None)
        if not torch.isfinite(loss):
            model.zero_grad(set_to_none=True)
            raise NonFiniteLossError(f"the GRPO loss is {loss.item()} on {len(batch)} episodes of "
                                     f"{int(stats['kept_groups'])} groups (check the episodes' logprobs and "
                                     "rewards); no step was taken")
        if loss.requires_grad:
            loss.backward()
        total += float(loss.detach())
        for key, value in loss_stats.items():
            summed[key] = summed.get(key, 0.0) + value
    stats.update(summed)
    return total


def _sharded_backward(loss: torch.Tensor, loss_stats: dict[str, float], params: list[torch.Tensor],
                      all_reduce: Callable[[list[torch.Tensor]], None] | None, stats: dict[str, float]) -> float:
    """Backpropagate this rank's share, then sum the gradients and the statistics over the ranks
    (``stats`` takes the sums); the summed loss.  The sum happens before the finiteness check,
    so that a NaN on one rank stops every rank at the same point instead of leaving the others
    waiting in a collective."""
    if loss.requires_grad:  # an empty share has no graph: its gradient is zero
        loss.backward()
    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    keys = sorted(loss_stats)
    totals = torch.tensor([float(loss.detach()), *(loss_stats[k] for k in keys)], dtype=torch.float64,
                          device=params[0].device)
    if all_reduce is not None:
        all_reduce([*grads, totals])
    summed = totals.tolist()
    stats.update(zip(keys, summed[1:]))
    return summed[0]
