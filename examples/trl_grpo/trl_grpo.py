"""An example, not a FrogNano trainer: TRL's ``trl.GRPOTrainer`` driven by FrogNano's harness episodes.

``frognano train`` trains with FrogNano's own GRPO step (``frognano/training/grpo.py`` names the
variant, rule by rule); this file shows how to train on the same episodes with TRL instead, for
those who want TRL's ecosystem (its callbacks, logging, hub integration).  It is not reachable
from the command line and lacks what the online loop has: the learnability-frontier sampler and
task synthesis during training (give it a fixed task list), DAPO refills, held-out evaluation,
FrogNano's checkpoints and exact ``--resume``, rollout workers, and the MLX backend.  Where its
loss differs from ``grpo.py``'s variant is listed below.  Use it from a source checkout
(``sys.path`` holding this folder), with ``pip install 'frognano[train]'``::

    from trl_grpo import build_trainer
    trainer = build_trainer(tasks, "path/to/transformers-model", "out", group_size=4, steps=20)
    trainer.train()

``build_trainer`` returns a ``GRPOTrainer`` whose ``rollout_func`` (``HarnessRollout``) runs the
serving harness (``frognano.training.rollout.rollout``: the same system prompt, tool schemas, observations and
budgets as ``frognano fix``, docs/ARCHITECTURE.md, invariant 3) on the trainer's own peft model, and hands TRL
the recorded token sequences.  TRL is given no ``tools``: it would build tool schemas from Python
docstrings and run its own tool loop, and the model must see the harness's schemas instead.

How the pieces meet (TRL 1.16, ``trl/trainer/grpo_trainer.py``):

* the dataset holds one row per task whose ``prompt`` is the task's ``instance_id``.  TRL's
  ``RepeatSampler`` repeats each prompt ``num_generations`` (= ``group_size``) times in a row,
  and ``rollout_func(prompts, trainer)`` receives that repeated list; the rollout looks each id
  up in the task table.  Ids rather than rendered prompts because the first observation exists
  only once the bug is laid out and its tests have run (failures, tracebacks, suspicious lines:
  ``RepoEnv.reset``), and because an opaque string passes through TRL untouched: TRL applies
  no chat template and no tool schema to what a ``rollout_func`` returns;
* per group of equal ids: the task is laid out once (one ``RepoEnv`` per repository tree,
  cached, ``rollout.Environments`` with the loop's settings), the search's candidates are listed
  once, and ``group_size`` episodes run, each with a seed drawn the way the loop draws them
  (``randrange(2**30)`` per episode from one generator), the generator seeded from
  (``seed``, the trainer's global step) so a resumed run draws the same seeds;
* the output: ``prompt_ids``, ``completion_ids`` (the whole multi-turn episode after the first
  prompt), ``logprobs`` (as sampled; see below) and ``env_mask`` (TRL reads it only when no
  ``tools`` / ``environment_factory`` is set, as its ``tool_mask``; the loss mask is
  ``completion_mask * tool_mask``, and the DAPO normaliser ``num_items_in_batch`` is that mask's
  sum).  ``env_mask`` is ``Sample.mask`` (1 sampled, 0 the environment's tokens: tool replies and
  template markers), set to all zeros for an infrastructure error or misaligned episode, for a
  truncated episode when ``GRPOConfig.mask_truncated`` (DAPO overlong filtering; TRL's own
  ``mask_truncated_completions`` is off, because it calls an episode truncated when its last
  token is not EOS, which says nothing about a multi-turn episode), for an episode longer than
  ``max_completion_length`` (cut to it), and for every episode of a group with no gradient
  (below).  Extra keys (``reward``, ``resolved``, ``error``, ``status``, ``truncated``) reach the
  reward functions as keyword arguments; ``frognano_reward`` returns the environment's reward, and
  None for an errored episode, which TRL turns into NaN: left out of its group's mean (nanmean)
  and given advantage 0, so an infrastructure failure is never scored 0;
* the variant (``grpo.py``'s rules, as far as TRL has them): ``GRPOConfig`` mapped onto
  ``trl.GRPOConfig`` (``loss_type``, ``epsilon`` / ``epsilon_high``, ``beta`` with the k3 term
  not weighted by the ratio, ``scale_rewards`` 'none' -> 'none' and 'std' -> 'group', the
  sampling temperature, ``learning_rate``, ``max_grad_norm``), LoRA through ``peft_config``
  (dropout 0), ``num_generations = group_size``, one generation batch per optimiser step
  (``steps_per_generation = gradient_accumulation_steps = num_iterations = 1``: on-policy),
  AdamW at a constant rate without weight decay; CPU (``use_cpu``, float32, no bf16) when CUDA
  is absent, bf16 on CUDA.

Where TRL's loss differs from ``grpo.py``'s variant (as ``torch_grpo`` computes it), honestly:

* **No renormalisation over the grammar mask** (rule 4).  Episodes are sampled under the tool-call grammar
  (constrained decoding): the sampler draws from softmax(logits / T) restricted to the allowed
  tokens.  TRL scores log softmax(logits / T) over the whole vocabulary and offers no hook to mask
  it per token (``env_mask`` is per token but all-or-nothing).  On-policy (one iteration, no
  vLLM) TRL's ratio is exactly 1 either way, so the clip never bites and only the gradient
  differs: TRL's is A * grad log p_full(token), the right one is A * grad log p_allowed(token) =
  A * (grad log p_full(token) - grad log P_full(allowed set)).  TRL's extra term moves, with the
  episode's advantage, the unconstrained model's total probability on the grammar's tokens at
  that step.  It does not cancel across a group (better episodes visit other states than worse
  ones), so it is a real but misdirected pressure: moot while decoding is constrained, visible
  where the model runs unconstrained (an HTTP endpoint, ``constrain`` off), and it spends the
  update on what the grammar already guarantees.  A *forced* token (the grammar allowed exactly one) has a right
  gradient of exactly 0 and a TRL gradient of the full push; ``mask_forced`` (default on) sets
  ``env_mask`` to 0 there, which makes those tokens' gradient right but also leaves them out of
  the DAPO token count (``torch_grpo`` counts them).  Tokens with several allowed choices keep the
  bias.  ``torch_grpo.grpo_step`` renormalises exactly (``Sample.allowed``); use it where this
  matters.
* The returned ``logprobs`` are the sampler's (renormalised over the grammar).  TRL reads them
  only for vLLM's importance-sampling correction and ``off_policy_mask_threshold``, which would
  compare them with its unrenormalised ones (a biased ratio): both are refused here.
* **No dynamic sampling in TRL** (rule 2).  A group whose rewards are all equal has advantage 0 in TRL
  too, but its tokens stay in the DAPO normaliser and dilute the other groups' update.  With
  ``filter_groups`` (default on) a group without a gradient (``grpo.has_gradient``) gets an
  all-zero ``env_mask``: for ``loss_type='dapo'`` that is exactly ``grpo.dynamic_filter``'s drop
  ('grpo' and 'dr_grpo' still divide by the batch's episode count, so there they are diluted).
  There is **no refill**: ``rollout_func`` must return one episode per prompt it was given, in
  order, and running another task in a dropped group's slot would have TRL log and pass to the
  reward functions the wrong task id; the online loop (``loop.py``) refills, this path does not.
  The share of zero-variance groups is TRL's ``frac_reward_zero_std``.
* TRL steps the optimiser on every batch, even one with no trained token (Adam's momentum then
  moves the weights on a zero gradient); ``grpo_step`` skips such a step.
* No vLLM: the episodes run in this process on the trainer's weights through FrogNano's torch
  decode loop (the grammar, the prompt cache and the exact token record live there), so
  ``use_vllm`` is refused rather than left to generate from prompts TRL would template itself.
  Wiring TRL's colocated vLLM engine in needs a FrogNano runtime backend over it that records
  token ids, log-probabilities and grammar masks; it is not built.

Close the environments (warm test runners) with ``trainer.rollout_func.close()``; a callback
also closes them when ``train()`` ends, and the next rollout reopens them.
"""

from __future__ import annotations

import logging
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from frognano.errors import FrogNanoError, UsageError
from frognano.training.env import RewardConfig
from frognano.training.grpo import GRPOConfig, has_gradient
from frognano.training.tasks import EvalTask

__all__ = ["HarnessRollout", "build_trainer", "frognano_reward", "lora_config", "trl_config"]

log = logging.getLogger(__name__)

#: TRL's name for our ``scale_rewards`` values.
_SCALES = {"none": "none", "std": "group"}
#: trl.GRPOConfig fields ``build_trainer`` derives (from ``GRPOConfig`` or its own arguments):
#: ``trl_args`` may not set them, so there is one place each is decided.
_OWNED = frozenset({
    "output_dir", "loss_type", "epsilon", "epsilon_high", "beta", "scale_rewards", "temperature", "learning_rate",
    "max_grad_norm", "max_completion_length", "num_generations", "per_device_train_batch_size",
    "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size", "num_iterations", "max_steps",
    "mask_truncated_completions", "seed", "use_cpu", "bf16", "fp16", "top_p", "top_k", "min_p",
    "repetition_penalty", "use_vllm", "vllm_importance_sampling_correction", "off_policy_mask_threshold",
    "remove_unused_columns", "disable_dropout", "lr_scheduler_type", "warmup_steps", "warmup_ratio",
    "weight_decay", "optim", "model_init_kwargs", "gradient_checkpointing", "activation_checkpointing",
    "use_bias_correction_kl",
})


def frognano_reward(completions: list, *, reward: Sequence[float | None] | None = None,
                    error: Sequence[str] | None = None, resolved: Sequence[bool] | None = None,
                    truncated: Sequence[bool] | None = None, log_metric: Callable | None = None,
                    **_: Any) -> list[float | None]:
    """The environment's reward of each episode (TRL reward function).

    ``HarnessRollout`` measured it (``RepoEnv.reward``, from pristine test files) and passed it as
    the extra key ``reward``; an errored episode's is None, which TRL leaves out of its group's
    baseline and gives advantage 0.  Also logs ``frognano/resolved``, ``frognano/errors`` and
    ``frognano/truncated`` (shares of the batch) through TRL's ``log_metric``.
    """
    if reward is None or len(reward) != len(completions):
        raise UsageError("frognano_reward needs the 'reward' key of HarnessRollout's output, one per completion "
                         "(use it with build_trainer's rollout_func)")
    values = [None if r is None or (error and error[i]) else float(r) for i, r in enumerate(reward)]
    if log_metric is not None and completions:
        n = len(completions)
        clean = [i for i, v in enumerate(values) if v is not None]
        if clean and resolved is not None:
            log_metric("frognano/resolved", sum(bool(resolved[i]) for i in clean) / len(clean))
        log_metric("frognano/errors", (n - len(clean)) / n)
        if truncated is not None:
            log_metric("frognano/truncated", sum(bool(t) for t in truncated) / n)
    return values


def lora_config(grpo: GRPOConfig) -> Any:
    """``peft.LoraConfig`` from ``grpo`` (as ``torch_grpo.lora_model``: dropout 0, so the training
    forward pass is the function the sampler ran)."""
    from peft import LoraConfig

    return LoraConfig(r=grpo.lora_rank, lora_alpha=grpo.lora_alpha, target_modules=list(grpo.lora_targets),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")


def trl_config(out_dir: Path | str, grpo: GRPOConfig, *, group_size: int, tasks_per_step: int, steps: int,
               seed: int, save_steps: int = 0, logging_steps: int = 1, gradient_checkpointing: bool | None = None,
               trl_args: dict[str, Any] | None = None) -> Any:
    """``trl.GRPOConfig`` for our variant (module docstring): one optimiser step per batch of
    ``tasks_per_step`` groups of ``group_size`` episodes."""
    import torch
    from trl import GRPOConfig as TRLConfig

    extra = dict(trl_args or {})
    clash = sorted(set(extra) & _OWNED)
    if clash:
        raise UsageError(f"trl_args sets {', '.join(clash)}, which build_trainer derives from GRPOConfig and its "
                         "own arguments (group_size, steps, seed, ...): set it there")
    cuda = torch.cuda.is_available()
    bf16 = cuda and torch.cuda.is_bf16_supported()
    if gradient_checkpointing is None:
        gradient_checkpointing = cuda  # long episodes on a GPU; on a CPU it only costs time
    batch = group_size * tasks_per_step
    # transformers 5 renamed gradient_checkpointing (a deprecated alias now, with a warning).
    names = {f.name for f in fields(TRLConfig)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return TRLConfig(
        output_dir=str(out_dir),
        # the variant
        loss_type=grpo.loss_type, epsilon=grpo.epsilon, epsilon_high=grpo.epsilon_high, beta=grpo.beta,
        # k3 to the reference, as GRPO and torch_grpo: TRL's default also weights it by the ratio,
        # which is differentiable, so it changes the KL gradient even on-policy
        use_bias_correction_kl=False,
        scale_rewards=_SCALES[grpo.scale_rewards], temperature=grpo.temperature, top_p=1.0, top_k=0,
        max_completion_length=grpo.max_completion_length, mask_truncated_completions=False,
        # on-policy: every batch is generated by the weights it updates, once
        num_generations=group_size, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        steps_per_generation=1, num_iterations=1, max_steps=steps,
        # the optimiser of torch_grpo.make_optimizer
        learning_rate=grpo.learning_rate, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        optim="adamw_torch", max_grad_norm=grpo.max_grad_norm,
        # rollouts come from rollout_func, scored against the weights they were sampled from
        use_vllm=False, vllm_importance_sampling_correction=False, off_policy_mask_threshold=None,
        disable_dropout=True, remove_unused_columns=False,
        # where it runs
        use_cpu=not cuda, bf16=bf16, fp16=False, **{checkpointing: gradient_checkpointing},
        model_init_kwargs={"dtype": "bfloat16" if bf16 else "float32"},
        # bookkeeping
        seed=seed, data_seed=seed, logging_steps=logging_steps, report_to="none",
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        **extra,
    )


class HarnessRollout:
    """TRL's ``rollout_func``: FrogNano harness episodes on the trainer's model (module docstring).

    Callable as ``rollout(prompts, trainer) -> dict``; ``close()`` ends the environments.
    """

    def __init__(self, tasks: Sequence[EvalTask], base_model_path: str, *, grpo: GRPOConfig, group_size: int,
                 tools: Sequence[str], max_turns: int, max_new_tokens: int, temperature: float, seed: int,
                 reward: RewardConfig = RewardConfig(), mask_forced: bool = True,
                 filter_groups: bool = True) -> None:
        from frognano.training.config import TrainConfig

        self.tasks = {t.instance_id: t for t in tasks}
        self.path = str(base_model_path)
        self.grpo = grpo
        self.reward = reward
        self.mask_forced = mask_forced
        self.filter_groups = filter_groups
        self.seed = seed
        # The loop's configuration object, for its checks and its environment settings (lanes 1,
        # constrained decoding, the same candidate budget), so both trainers run the same episodes.
        self.config = TrainConfig(group_size=group_size, tools=list(tools), max_turns=max_turns,
                                  max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                  grpo={k: v for k, v in asdict(grpo).items() if k != "temperature"})
        self.policy: Any = None
        self.envs: Any = None
        self.groups = 0  # groups run so far (Sample.group of the next one)

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()

    def _policy(self, trainer: Any) -> Any:
        """The trainer's model as a FrogNano in-process model, sharing its tokenizer (rebuilt only
        if the trainer swaps the model object; LoRA updates happen in place)."""
        from frognano.runtime.torch import TorchModel
        from frognano.training.rollout import Environments

        model = trainer.model
        if self.policy is None or self.policy.model is not model:
            self.close()
            self.policy = TorchModel(f"policy:{Path(self.path).name}", model, trainer.processing_class, path=self.path)
            self.envs = Environments(self.config, self.policy)
        return self.policy

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        unknown = [p for p in prompts if not isinstance(p, str) or p not in self.tasks]
        if unknown:
            raise UsageError(f"rollout_func got prompts that name no task, e.g. {unknown[0]!r:.80} (the dataset's "
                             "prompts must be the instance_ids of the tasks given to build_trainer)")
        policy = self._policy(trainer)
        eos = _eos_id(trainer)
        # A per-step generator: a resumed run draws the same episode seeds as the uninterrupted one.
        rng = random.Random(f"{self.seed}:{trainer.state.global_step}")
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "reward",
                                                "resolved", "error", "status", "truncated")}
        model = policy.model
        training = model.training
        # Decode in eval mode: under gradient checkpointing a training-mode forward drops the KV
        # cache (use_cache=False) that the decode loop extends token by token.
        model.eval()
        try:
            start = 0
            while start < len(prompts):
                stop = start
                while stop < len(prompts) and prompts[stop] == prompts[start]:
                    stop += 1
                self._group(self.tasks[prompts[start]], stop - start, rng, eos, out)
                start = stop
        finally:
            model.train(training)
        return out

    def _group(self, task: EvalTask, n: int, rng: random.Random, eos: int, out: dict[str, list]) -> None:
        """``n`` episodes of ``task`` appended to ``out`` (as ``rollout.rollout_group``, plus the masks)."""
        from frognano.training.rollout import Rollout, candidates_for, rollout

        index = self.groups
        self.groups += 1
        try:
            env = self.envs.get(task)
            env.engine.settings = self.envs.settings
            state = env.reset(task)
            search = candidates_for(env, state)
        except FrogNanoError as exc:  # TaskError, InfraError: the group carries no reward at all
            log.warning("task %s skipped: %s", task.instance_id, exc)
            for _ in range(n):
                self._emit(out, None, str(exc), eos, keep=False)
            return
        runs: list[Rollout] = [rollout(env, state, group=index, seed=rng.randrange(1 << 30),
                                       tools=tuple(self.config.tools), reward=self.reward, search=search)
                               for _ in range(n)]
        keep = not self.filter_groups or has_gradient([r.sample for r in runs])
        for r in runs:
            self._emit(out, r, r.error, eos, keep=keep)

    def _emit(self, out: dict[str, list], r: Any, error: str, eos: int, *, keep: bool) -> None:
        if r is None or r.sample.error or not r.sample.completion_ids:
            prompt = (r.sample.prompt_ids if r is not None else []) or [eos]
            completion = (r.sample.completion_ids if r is not None else []) or [eos]  # TRL reads ids[-1]
            out["prompt_ids"].append(list(prompt))
            out["completion_ids"].append(list(completion))
            out["logprobs"].append([0.0] * len(completion))
            out["env_mask"].append([0] * len(completion))
            out["reward"].append(None)
            out["resolved"].append(False)
            out["error"].append(error or "error")
            out["status"].append(r.status if r is not None else "error")
            out["truncated"].append(False)
            return
        s = r.sample
        completion, mask, logprobs = list(s.completion_ids), list(s.mask), list(s.logprobs)
        limit = self.grpo.max_completion_length
        if len(completion) > limit:
            log.info("an episode of %d completion tokens is cut to max_completion_length (%d) and not trained on",
                     len(completion), limit)
            completion, logprobs, keep = completion[:limit], logprobs[:limit], False
        if not keep or (s.truncated and self.grpo.mask_truncated):
            mask = [0] * len(completion)
        elif self.mask_forced and s.allowed is not None:
            mask = [0 if m and _forced(a) else m for m, a in zip(mask, s.allowed)]
        out["prompt_ids"].append(list(s.prompt_ids))
        out["completion_ids"].append(completion)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(mask[: len(completion)])
        out["reward"].append(float(s.reward))
        out["resolved"].append(bool(r.resolved))
        out["error"].append("")
        out["status"].append(r.status)
        out["truncated"].append(bool(s.truncated))


def _forced(packed: bytes | None) -> bool:
    """Whether the grammar allowed exactly one token at this step (packed little-endian bits)."""
    if packed is None:
        return False
    return int.from_bytes(packed, "little").bit_count() == 1


def _eos_id(trainer: Any) -> int:
    ids = getattr(trainer, "eos_token_ids", None) or [trainer.processing_class.eos_token_id]
    return int(ids[0])


def build_trainer(tasks: Sequence[EvalTask], base_model_path: str | Path, out_dir: str | Path, *,
                  grpo: GRPOConfig = GRPOConfig(), group_size: int = 4, tasks_per_step: int = 1, steps: int = 20,
                  tools: Sequence[str] = ("candidates", "apply", "submit"), max_turns: int = 3,
                  max_new_tokens: int = 48, temperature: float = 1.0, seed: int = 0,
                  reward: RewardConfig = RewardConfig(), mask_forced: bool = True, filter_groups: bool = True,
                  reward_funcs: Sequence[Callable] = (), save_steps: int = 0, logging_steps: int = 1,
                  gradient_checkpointing: bool | None = None, trl_args: dict[str, Any] | None = None,
                  callbacks: Sequence[Any] = ()) -> Any:
    """A ``trl.GRPOTrainer`` that trains LoRA adapters on ``base_model_path`` (a transformers
    folder) with FrogNano harness episodes on ``tasks`` (module docstring).

    ``tasks_per_step`` groups of ``group_size`` episodes make one optimiser step; ``steps`` steps
    in all.  ``tools``, ``max_turns``, ``max_new_tokens`` and ``temperature`` are the episodes'
    (as ``TrainConfig``'s; ``temperature`` must equal ``grpo.temperature``).  ``reward`` scores a
    patch (``RewardConfig``: binary by default; partial credit, format penalty).  ``reward_funcs``
    are added to ``frognano_reward`` (TRL sums them).  ``save_steps`` > 0 saves the adapter to
    ``out_dir`` every that many steps.  ``trl_args`` passes other ``trl.GRPOConfig`` fields
    (``log_completions``, ``logging_dir``, ...), not the ones derived here.
    """
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    tasks = list(tasks)
    if not tasks:
        raise UsageError("build_trainer needs at least one task")
    ids = [t.instance_id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UsageError(f"instance_id {dup} names two tasks; the rollout looks tasks up by it")
    if temperature != grpo.temperature:
        raise UsageError(f"temperature ({temperature}) must equal grpo.temperature ({grpo.temperature}): the loss "
                         "scores episodes at the temperature they were sampled at")
    for name, value in (("tasks_per_step", tasks_per_step), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be an integer >= 1, got {value!r}")
    if tasks_per_step > len(tasks):
        # TRL's RepeatSampler drops a partial batch of prompts: training would see no batch at all.
        raise UsageError(f"tasks_per_step ({tasks_per_step}) exceeds the number of tasks ({len(tasks)})")
    if save_steps < 0 or logging_steps < 1:
        raise UsageError(f"save_steps must be >= 0 and logging_steps >= 1, got {save_steps} and {logging_steps}")
    rollout = HarnessRollout(tasks, str(base_model_path), grpo=grpo, group_size=group_size, tools=tools,
                             max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=temperature,
                             seed=seed, reward=reward, mask_forced=mask_forced, filter_groups=filter_groups)
    args = trl_config(out_dir, grpo, group_size=group_size, tasks_per_step=tasks_per_step, steps=steps, seed=seed,
                      save_steps=save_steps, logging_steps=logging_steps,
                      gradient_checkpointing=gradient_checkpointing, trl_args=trl_args)
    tokenizer = AutoTokenizer.from_pretrained(str(base_model_path), padding_side="left")

    class _Close(TrainerCallback):
        def on_train_end(self, *_: Any, **__: Any) -> None:
            rollout.close()

    dataset = Dataset.from_dict({"prompt": ids})
    with warnings.catch_warnings():
        # rollout_func is "experimental" in TRL 1.16: known, and this module pins what it relies on.
        warnings.filterwarnings("ignore", message=".*rollout_func.*experimental.*", category=UserWarning)
        trainer = GRPOTrainer(model=str(base_model_path), reward_funcs=[frognano_reward, *reward_funcs], args=args,
                              train_dataset=dataset, processing_class=tokenizer, peft_config=lora_config(grpo),
                              rollout_func=rollout, callbacks=[_Close(), *callbacks])
    if torch.cuda.is_available():
        log.info("TRL GRPO on %s (bf16=%s)", torch.cuda.get_device_name(0), args.bf16)
    return trainer
