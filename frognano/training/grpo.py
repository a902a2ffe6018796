"""The GRPO variant FrogNano trains, described here once, and its framework-agnostic pieces.

Every trainer points here: ``torch_grpo.py`` (transformers + peft) and ``mlx_grpo.py`` (mlx-lm)
compute this variant's loss from these pieces, so both backends train the same thing and the
tests check each piece on plain lists; ``loop.py`` feeds them (and adds the refills below).

The variant, named exactly (defaults in ``GRPOConfig``; each rule says where it comes from):

1. **Advantages**: each episode's reward minus its group's mean reward, *not* divided by the
   group's standard deviation (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like
   Training"); ``scale_rewards="std"`` divides by the sample std + ``STD_EPS`` (the original
   GRPO, Shao et al. 2024, DeepSeekMath).  ``group_advantages``.
2. **Dynamic sampling** (DAPO, Yu et al. 2025): a group carries a gradient only with at least 2
   clean episodes whose rewards are not all equal (``has_gradient``, the one test of that);
   other groups are dropped from the batch (``dynamic_filter``) rather than diluting it.  The
   online loop also replaces up to ``refills`` zero-variance groups (``zero_variance``) per
   step with new tasks' groups, and logs their share (``zero_variance_fraction``).
3. **Masking**: only the policy's own tokens are trained (``Sample.mask``: a multi-turn
   episode's completion interleaves them with the environment's tool replies and chat-template
   tokens, as nanochat's engine marks sampled vs forced tokens); an infrastructure error (a
   sandbox that died, a misaligned token sequence: docs/ARCHITECTURE.md §5, never scored 0) leaves its
   group before the baseline and never reaches the loss; an episode cut off by its turn or token
   budget is masked out of the loss when ``mask_truncated`` (DAPO overlong filtering: "ran out of
   budget" is not punished as a wrong answer).  ``loss_mask``.
4. **Renormalised constrained log-probabilities**: where the rollout sampled under the tool-call
   grammar, the episode records each step's allowed tokens (``Sample.allowed``) and the
   trainer's log-probabilities are renormalised over the same tokens, at the sampling
   temperature (``renormalised_logprob`` is the reference; float32 whatever the model's dtype),
   so the ratio compares the policy with the distribution actually sampled: 1 on-policy, to
   float precision.
5. **Surrogate and clipping**: PPO's clipped ratio, min(r A, clip(r, 1 - epsilon, 1 +
   epsilon_high) A) per token, r = pi_theta / pi_sampler with the sampler's log-probabilities
   taken from the episode (``Sample.logprobs``), and DAPO's asymmetric "clip-higher" (epsilon
   0.2 below, epsilon_high 0.28 above).
6. **Normalisation** (``loss_type``): "dapo", token level over the whole batch (the default);
   "dr_grpo", the constant max_completion_length x batch size; "grpo", the mean per episode,
   then over episodes.
7. **KL**: none by default (``beta=0``, as DAPO and Dr. GRPO: no reference forward pass); with
   ``beta > 0`` the k3 estimator exp(ref - new) - (ref - new) - 1 (Schulman 2020, as GRPO) to
   the base model, i.e. the LoRA adapters disabled.
8. **Update**: AdamW on the LoRA weights only, no weight decay, the gradient's global norm
   clipped to ``max_grad_norm``, one step per batch (on-policy: each batch is sampled by the
   weights it updates, once), and no step at all when no token is trained (Adam's momentum
   would move the weights on a zero gradient).  A non-finite loss or gradient updates nothing
   (``NonFiniteLossError``).

What ``examples/trl_grpo`` (TRL's ``GRPOTrainer`` driven by these episodes) cannot match of
this is listed in its own docstring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import FrogNanoError, UsageError

__all__ = ["LOSS_TYPES", "SCALES", "GRPOConfig", "NonFiniteLossError", "Sample", "all_equal", "dynamic_filter",
           "group_advantages", "has_gradient", "loss_mask", "renormalised_logprob", "zero_variance"]

LOSS_TYPES: tuple[str, ...] = ("dapo", "dr_grpo", "grpo")
SCALES: tuple[str, ...] = ("none", "std")
#: Added to the group's std before dividing (TRL's value): a group of near-equal rewards gets
#: large but finite advantages instead of a division by zero.
STD_EPS = 1e-4
#: Rewards closer than this count as equal: with std scaling a 1e-12 difference from float
#: arithmetic in partial-credit rewards would otherwise become a full-size advantage.
EQUAL_TOL = 1e-9


class NonFiniteLossError(FrogNanoError):
    """A training step produced a NaN or infinite loss (or gradient); nothing was updated."""


@dataclass
class Sample:
    """One episode, as the trainer sees it: token ids, which of them the policy chose, the
    log-probabilities it chose them with, and the reward.  ``group`` ties together the episodes
    of one task (one prompt) whose rewards are compared to each other."""

    prompt_ids: list[int]
    completion_ids: list[int]  # everything after the prompt: sampled tokens and environment tokens
    mask: list[int]  # per completion token: 1 sampled by the policy (trained), 0 environment (no loss)
    # Per completion token: log-probability under the distribution actually sampled (temperature,
    # grammar mask renormalised, see ``renormalised_logprob``); 0.0 where mask is 0.
    logprobs: list[float]
    reward: float
    group: int
    truncated: bool = False  # the episode hit its turn or token budget
    error: bool = False  # an infrastructure failure: the reward means nothing
    # Per completion token, where constrained decoding restricted it: the tokens the grammar
    # allowed at that step, as a bitmask over the vocabulary packed little-endian
    # (``numpy.packbits(mask, bitorder="little")``); None (or a None entry): no restriction.
    # The trainer renormalises its log-probabilities over the same tokens, so the ratio compares
    # the policy with the distribution actually sampled.
    allowed: list[bytes | None] | None = None

    def __post_init__(self) -> None:
        n = len(self.completion_ids)
        if self.allowed is not None and len(self.allowed) != n:
            raise UsageError(f"sample of group {self.group}: allowed ({len(self.allowed)}) must have one "
                             f"entry per completion token ({n})")
        if len(self.mask) != n or len(self.logprobs) != n:
            raise UsageError(
                f"sample of group {self.group}: completion_ids ({n}), mask ({len(self.mask)}) and "
                f"logprobs ({len(self.logprobs)}) must have the same length"
            )
        if not self.prompt_ids:
            # The first completion token is predicted from the last prompt token: there must be one.
            raise UsageError(f"sample of group {self.group}: prompt_ids is empty")
        if any(m not in (0, 1) for m in self.mask):
            raise UsageError(f"sample of group {self.group}: mask holds values other than 0 and 1")


def all_equal(rewards: Sequence[float]) -> bool:
    """Whether ``rewards`` are equal to within ``EQUAL_TOL`` (an empty or single reward is)."""
    return not rewards or max(rewards) - min(rewards) <= EQUAL_TOL


def has_gradient(group: Sequence[Sample]) -> bool:
    """Whether one group of episodes carries a gradient (DAPO's dynamic sampling, rule 2): at
    least 2 clean episodes (an errored one's reward means nothing) whose rewards are not all
    equal.  The one test of it: ``dynamic_filter`` drops the groups that fail it, and the TRL
    example masks them."""
    rewards = [s.reward for s in group if not s.error]
    return len(rewards) >= 2 and not all_equal(rewards)


def zero_variance(group: Sequence[Sample]) -> bool:
    """Whether a group failed ``has_gradient`` for its rewards alone: at least 2 clean episodes,
    all rewarded alike (too easy or too hard for the policy, DAPO's sign).  What the online loop
    refills and counts in ``zero_variance_fraction``; a group short of clean episodes is not
    one (a new task would not say more about the policy)."""
    rewards = [s.reward for s in group if not s.error]
    return len(rewards) >= 2 and all_equal(rewards)


def group_advantages(rewards: Sequence[float], *, scale: str = "none") -> list[float]:
    """The advantages of one group's episodes: each reward minus the group's mean.

    ``scale="none"`` (Dr. GRPO) stops there.  Dividing by the group's standard deviation
    (``scale="std"``, the original GRPO) makes every group's advantages the same size, which
    up-weights groups that are nearly all right or all wrong (Dr. GRPO's "question-level
    difficulty bias"); the std is the sample std (n - 1, as torch's ``std`` and TRL), plus
    ``STD_EPS``.  ``[1, 0, 0, 0]`` gives ``[0.75, -0.25, -0.25, -0.25]`` unscaled.  A group of
    equal rewards gets zeros either way (``dynamic_filter`` drops such groups first).
    """
    if scale not in SCALES:
        raise UsageError(f"scale {scale!r}: expected one of {', '.join(SCALES)}")
    if not rewards:
        return []
    if all_equal(rewards):  # exact zeros, not float noise that std scaling would blow up
        return [0.0] * len(rewards)
    mean = math.fsum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if scale == "none":
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / (len(rewards) - 1))
    return [c / (std + STD_EPS) for c in centred]


def dynamic_filter(groups: Mapping[int, list[Sample]]) -> tuple[dict[int, list[Sample]], int]:
    """DAPO's dynamic sampling: ``(kept, dropped)``, the groups that carry a gradient
    (``has_gradient``) without their errored samples, and how many groups were dropped.

    Errored samples leave their group (their reward means nothing, so they may neither earn nor
    lose; nor may they shift the group's mean).  A group left with fewer than 2 samples has no
    one to be compared with, and a group whose rewards are all equal has zero advantage
    everywhere: both are dropped, rather than counted in the batch's token total where they
    would only shrink the other groups' updates.  Group order is kept.
    """
    kept: dict[int, list[Sample]] = {}
    dropped = 0
    for key, samples in groups.items():
        if not has_gradient(samples):
            dropped += 1
            continue
        kept[key] = [s for s in samples if not s.error]
    return kept, dropped


def loss_mask(sample: Sample, *, mask_truncated: bool = True) -> list[int]:
    """Which completion tokens the loss counts: the policy's own tokens (``sample.mask``), none
    of an errored episode's, and none of a truncated one's when ``mask_truncated`` (DAPO's
    overlong filtering: an episode that ran out of budget was not necessarily wrong)."""
    if sample.error or (mask_truncated and sample.truncated):
        return [0] * len(sample.mask)
    return list(sample.mask)


def renormalised_logprob(logits: Sequence[float], allowed: set[int] | None, token: int,
                         temperature: float) -> float:
    """log p(token) where p = softmax(logits / temperature) restricted to ``allowed`` (the
    grammar mask; None: every token) and renormalised over it: what a constrained sampler
    draws from, so what a backend must record in ``Sample.logprobs``.

    The reference the backends are tested against: plain ``math`` in float64, log-sum-exp
    shifted by the maximum.  A token outside ``allowed`` has probability 0: ``-inf``.
    Temperature 0 (greedy) is no distribution and is refused.
    """
    if not temperature > 0:
        raise UsageError(f"temperature must be positive, got {temperature}")
    n = len(logits)
    if not 0 <= token < n:
        raise UsageError(f"token {token} is outside the vocabulary of {n} logits")
    ids = range(n) if allowed is None else sorted(allowed)
    if not ids:
        raise UsageError("the allowed set is empty: nothing can be sampled")
    if ids[0] < 0 or ids[-1] >= n:
        raise UsageError(f"allowed token ids must lie in [0, {n}), got {ids[0]}..{ids[-1]}")
    if allowed is not None and token not in allowed:
        return -math.inf
    scaled = [float(logits[i]) / temperature for i in ids]
    top = max(scaled)
    log_z = top + math.log(math.fsum(math.exp(x - top) for x in scaled))
    return float(logits[token]) / temperature - log_z


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class GRPOConfig:
    """How a GRPO step is computed.  Every field has a default and a help string; ``__post_init__``
    checks ranges and the fields against each other (``UsageError`` naming both)."""

    loss_type: str = field(default="dapo", metadata=_help(
        "how the per-token losses become one number: 'dapo' (sum over every trained token of the batch "
        "/ their count: each token weighs the same, long episodes are not diluted); 'dr_grpo' (sum / "
        "(max_completion_length x batch size): a constant, so no length bias at all); 'grpo' (mean per "
        "episode, then mean over episodes: the original, which favours short right answers and long "
        "wrong ones)"))
    epsilon: float = field(default=0.2, metadata=_help(
        "lower clip of the probability ratio: a token's ratio below 1 - epsilon gains nothing more (PPO)"))
    epsilon_high: float = field(default=0.28, metadata=_help(
        "upper clip of the ratio, 1 + epsilon_high (DAPO clip-higher: more room above than below lets "
        "rare tokens that paid off grow, which keeps entropy from collapsing); equal to epsilon: PPO's "
        "symmetric clip"))
    beta: float = field(default=0.0, metadata=_help(
        "weight of the KL penalty to the reference model (the base model: LoRA adapters disabled), k3 "
        "estimator; 0: no penalty and no reference forward pass (DAPO, Dr. GRPO: with verifiable "
        "rewards the KL term mostly slows learning)"))
    scale_rewards: str = field(default="none", metadata=_help(
        "'none': advantage = reward - group mean (Dr. GRPO); 'std': also divided by the group's std "
        "(original GRPO; up-weights nearly-solved and nearly-hopeless tasks)"))
    mask_truncated: bool = field(default=True, metadata=_help(
        "leave episodes that hit their turn or token budget out of the loss (DAPO overlong filtering)"))
    temperature: float = field(default=1.0, metadata=_help(
        "the sampler's temperature; the trainer divides its logits by the same value, so the ratio "
        "compares the policy with the distribution the episodes were drawn from"))
    learning_rate: float = field(default=1e-5, metadata=_help(
        "AdamW learning rate of the LoRA weights (LoRA wants about 10x a full fine-tune's rate)"))
    max_grad_norm: float = field(default=1.0, metadata=_help(
        "clip the gradient's global L2 norm to this before the step; 0: no clipping"))
    lora_rank: int = field(default=8, metadata=_help("rank r of the LoRA adapters"))
    lora_alpha: float = field(default=16.0, metadata=_help(
        "LoRA scale numerator: the adapter's update is multiplied by lora_alpha / lora_rank"))
    lora_targets: tuple[str, ...] = field(default=("q_proj", "k_proj", "v_proj", "o_proj"), metadata=_help(
        "module names that get LoRA adapters (the attention projections of Qwen-style models)"))
    max_completion_length: int = field(default=8192, metadata=_help(
        "most tokens after the prompt an episode may hold (the policy's and the environment's); "
        "'dr_grpo' divides by it, and refuses longer episodes"))
    micro_batch: int = field(default=2, metadata=_help(
        "episodes per forward and backward pass of an update; the gradients of a step's passes add up "
        "to the one-pass gradient (the loss keeps the whole batch's normaliser).  The logits of one "
        "SmolLM2 episode of 2,000 tokens are 400 MB in float32, several copies of them in the backward "
        "pass: memory grows with the passes' size, not the step's"))

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise UsageError(f"loss_type {self.loss_type!r}: expected one of {', '.join(LOSS_TYPES)}")
        if self.scale_rewards not in SCALES:
            raise UsageError(f"scale_rewards {self.scale_rewards!r}: expected one of {', '.join(SCALES)}")
        if not 0 < self.epsilon < 1:
            raise UsageError(f"epsilon must lie in (0, 1), got {self.epsilon}")
        if not self.epsilon_high >= self.epsilon:
            raise UsageError(
                f"epsilon_high ({self.epsilon_high}) must be at least epsilon ({self.epsilon}): "
                "clip-higher widens the upper clip, never narrows it"
            )
        if not self.beta >= 0:
            raise UsageError(f"beta must not be negative, got {self.beta}")
        if not self.temperature > 0:
            raise UsageError(f"temperature must be positive, got {self.temperature} (greedy episodes "
                             "have no distribution to train on)")
        if not self.learning_rate > 0:
            raise UsageError(f"learning_rate must be positive, got {self.learning_rate}")
        if not self.max_grad_norm >= 0:
            raise UsageError(f"max_grad_norm must not be negative, got {self.max_grad_norm}")
        if self.lora_rank < 1:
            raise UsageError(f"lora_rank must be at least 1, got {self.lora_rank}")
        if isinstance(self.micro_batch, bool) or not isinstance(self.micro_batch, int) or self.micro_batch < 1:
            raise UsageError(f"micro_batch must be an integer >= 1, got {self.micro_batch!r}")
        if not self.lora_alpha > 0:
            raise UsageError(f"lora_alpha must be positive, got {self.lora_alpha}")
        if not self.lora_targets:
            raise UsageError("lora_targets is empty: no weights would train")
        if self.max_completion_length < 1:
            raise UsageError(f"max_completion_length must be at least 1, got {self.max_completion_length}")
        if self.loss_type == "dr_grpo" and self.scale_rewards == "std":
            # Dr. GRPO is defined as removing *both* biases; std scaling brings one back.
            raise UsageError(
                "loss_type 'dr_grpo' with scale_rewards 'std' reintroduces the difficulty bias Dr. GRPO "
                "removes: use scale_rewards 'none' with loss_type 'dr_grpo'"
            )


def assemble(samples: list[Sample], config: GRPOConfig) -> tuple[list[Sample], list[float], dict[str, float]]:
    """The batch a GRPO step's loss sees (the clean episodes of the groups ``dynamic_filter``
    keeps, in order), one advantage each (``group_advantages``), and the step's statistics so
    far: ``kept_groups``, ``dropped_groups``, ``errors``, ``reward_mean`` (clean episodes),
    ``samples`` (in the loss), and ``loss``, ``grad_norm``, ``tokens``, ``stepped`` at 0 until a
    step sets them.  Both trainers (``torch_grpo``, ``mlx_grpo``) count through this one
    function.  The share of zero-variance groups is the online loop's to count
    (``zero_variance_fraction``): it sees every group of a step, the refilled ones too."""
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    kept, dropped = dynamic_filter(groups)
    flat = [s for g in groups.values() for s in g if not s.error]
    batch: list[Sample] = []
    advantages: list[float] = []
    for group in kept.values():
        batch.extend(group)
        advantages.extend(group_advantages([s.reward for s in group], scale=config.scale_rewards))
    stats = {
        "kept_groups": float(len(kept)), "dropped_groups": float(dropped),
        "errors": float(sum(s.error for s in samples)),
        "reward_mean": math.fsum(s.reward for s in flat) / len(flat) if flat else 0.0,
        "samples": float(len(batch)), "loss": 0.0, "grad_norm": 0.0, "tokens": 0.0, "stepped": 0.0,
    }
    return batch, advantages, stats


def check_loss_inputs(samples: Sequence[Sample], advantages: Sequence[float], config: GRPOConfig) -> None:
    """What both trainers' ``grpo_loss`` refuse: a count mismatch, no samples, and an episode
    longer than the constant ``dr_grpo`` divides by."""
    if len(advantages) != len(samples):
        raise UsageError(f"{len(samples)} samples but {len(advantages)} advantages")
    if not samples:
        raise UsageError("grpo_loss needs at least one sample")
    if config.loss_type == "dr_grpo":
        longest = max(len(s.completion_ids) for s in samples)
        if longest > config.max_completion_length:
            raise UsageError(f"an episode holds {longest} completion tokens, more than max_completion_length "
                             f"({config.max_completion_length}) by which loss_type 'dr_grpo' divides")

