"""The learnability-frontier sampler: which task families to synthesise next (docs/ARCHITECTURE.md §5).

A *family* is a setting of the knobs that make a synthesised bug hard: the operator kind, the
number of bugs, how much the hint gives away, and how far the bug sits from the failing test.
For each family the sampler keeps a decayed Beta(alpha, beta) estimate of the current model's
success rate p, and draws families in proportion to p(1-p) plus a small uniform floor. p(1-p)
is largest at p = 1/2: the model trains where it sometimes succeeds, so GRPO-style group
advantages are non-zero, and spends little on what it always or never solves. When a family's
p passes ``promote_at`` its next harder setting joins the active set, so the frontier moves
toward harder tasks as the model improves.

``UniformSampler`` draws uniformly from a fixed set and never promotes: the ablation baseline.
Both satisfy ``Sampler`` and save/load their full state (estimates and RNG) as JSON, so a run
resumes to the identical sequence of draws.

Only the standard library is used, so synthesis workers import this cheaply.
"""

from __future__ import annotations

import abc
import functools
import json
import logging
import math
import os
import random
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import UsageError

__all__ = ["HINTS", "MAX_DISTANCE", "Family", "FrontierConfig", "FrontierSampler", "Sampler", "UniformSampler",
           "load_sampler"]

log = logging.getLogger(__name__)

#: Hint levels from the most to the least telling, i.e. from easiest to hardest task:
#: "function" names the buggy function, "file" only its file, "test" only the failing tests.
HINTS: tuple[str, ...] = ("function", "file", "test")
#: Distance buckets between the test and the bug: 0 = the function the test calls directly,
#: 1 = one call further, 2 = two or more ("2+").
MAX_DISTANCE = 2
#: The order in which ``Family.harder`` turns the knobs when they are equally far along: a
#: weaker hint first (same injected bug, only the prompt changes, cheapest to synthesise),
#: then distance, then more bugs (multi-bug tasks cost the most to inject and validate).
KNOBS: tuple[str, ...] = ("hint", "distance", "bugs")

_OPERATOR = re.compile(r"[A-Za-z0-9_]+")
_KEY = re.compile(r"(?P<operator>[A-Za-z0-9_]+)-b(?P<bugs>[0-9]+)-(?P<hint>[a-z]+)-d(?P<distance>[0-9]+)")
_STATE_VERSION = 1


# --------------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------------


@functools.total_ordering
@dataclass(frozen=True)
class Family:
    """One setting of the difficulty knobs. Ordered by ``level`` (easiest first), ties by the
    knobs and then the operator, so sorting is total and stable."""

    operator: str
    bugs: int = 1
    hint: str = "function"
    distance: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.operator, str) or not _OPERATOR.fullmatch(self.operator):
            raise UsageError(f"family operator must be a non-empty name of letters, digits and _, "
                             f"got {self.operator!r}")
        if isinstance(self.bugs, bool) or not isinstance(self.bugs, int) or self.bugs < 1:
            raise UsageError(f"family bugs must be an integer >= 1, got {self.bugs!r}")
        if self.hint not in HINTS:
            raise UsageError(f"family hint must be one of {', '.join(HINTS)}, got {self.hint!r}")
        if (isinstance(self.distance, bool) or not isinstance(self.distance, int)
                or not 0 <= self.distance <= MAX_DISTANCE):
            raise UsageError(f"family distance must be a bucket 0..{MAX_DISTANCE} "
                             f"({MAX_DISTANCE} meaning {MAX_DISTANCE} or more), got {self.distance!r}")

    @property
    def key(self) -> str:
        """Stable readable name, e.g. ``compare-b1-function-d0``; ``from_key`` inverts it."""
        return f"{self.operator}-b{self.bugs}-{self.hint}-d{self.distance}"

    @classmethod
    def from_key(cls, key: str) -> Family:
        match = _KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            raise UsageError(f"not a family key (operator-bN-hint-dN): {key!r}")
        return cls(match["operator"], int(match["bugs"]), match["hint"], int(match["distance"]))

    @staticmethod
    def bucket(distance: int) -> int:
        """The distance bucket of a measured call distance (0, 1, 2 = 2 or more)."""
        if distance < 0:
            raise UsageError(f"distance must not be negative, got {distance}")
        return min(distance, MAX_DISTANCE)

    @property
    def level(self) -> int:
        """Steps of difficulty above the easiest setting (one per knob step)."""
        return (self.bugs - 1) + HINTS.index(self.hint) + self.distance

    def _sort_key(self) -> tuple:
        return (self.level, self.bugs, HINTS.index(self.hint), self.distance, self.operator)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Family):
            return NotImplemented
        return self._sort_key() < other._sort_key()

    def harder(self, max_bugs: int = 3) -> Family | None:
        """The next harder setting, one knob one step further, or None at the hardest.

        The knob taken is the one least far along (ties in ``KNOBS`` order), so repeated calls
        walk a diagonal (weaker hint, farther, more bugs, weaker hint, ...) instead of maxing one
        knob first; each family has exactly one successor, which keeps the active set a union of
        short chains (at most ``len(HINTS) + MAX_DISTANCE + max_bugs - 2`` steps each).
        """
        steps = {"hint": HINTS.index(self.hint), "distance": self.distance, "bugs": self.bugs - 1}
        limits = {"hint": len(HINTS) - 1, "distance": MAX_DISTANCE, "bugs": max_bugs - 1}
        open_knobs = [k for k in KNOBS if steps[k] < limits[k]]
        if not open_knobs:
            return None
        knob = min(open_knobs, key=lambda k: (steps[k], KNOBS.index(k)))
        if knob == "hint":
            return Family(self.operator, self.bugs, HINTS[steps["hint"] + 1], self.distance)
        if knob == "distance":
            return Family(self.operator, self.bugs, self.hint, self.distance + 1)
        return Family(self.operator, self.bugs + 1, self.hint, self.distance)

    def chain(self, max_bugs: int = 3) -> list[Family]:
        """This family and every setting ``harder`` leads to, easiest first."""
        out: list[Family] = [self]
        while (nxt := out[-1].harder(max_bugs)) is not None:
            out.append(nxt)
        return out


def _family(value: Family | str) -> Family:
    return value if isinstance(value, Family) else Family.from_key(value)


def _unique(families: Iterable[Family | str]) -> list[Family]:
    out: list[Family] = []
    for fam in map(_family, families):
        if fam not in out:
            out.append(fam)
    if not out:
        raise UsageError("a sampler needs at least one family")
    return out


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------

DECAY_SCOPES = ("family", "all")


@dataclass
class FrontierConfig:
    """Settings of ``FrontierSampler``; every field has a default and a help string."""

    decay: float = field(default=0.95, metadata={
        "help": "evidence kept per update, in (0, 1]: after an update the old successes and "
                "failures count decay times as much, so the estimate follows a learner that "
                "improves (0.95 remembers about 1/(1-0.95) = 20 outcomes; 1 never forgets)"})
    decay_scope: str = field(default="family", metadata={
        "help": "whose evidence an update decays: family (only the updated family's, so each "
                "estimate averages over its own last ~1/(1-decay) outcomes whatever the number "
                "of families) | all (every family's, a clock of training steps; suits learners "
                "whose skills transfer, and needs decay much closer to 1)"})
    prior: tuple[float, float] = field(default=(1.0, 1.0), metadata={
        "help": "Beta prior (alpha0, beta0) of every family's success rate; (1, 1) is uniform, "
                "so a new family starts at p = 1/2, the most learnable, and is explored at once"})
    floor: float = field(default=0.05, metadata={
        "help": "probability mass spread evenly over all active families, in [0, 1), so no "
                "family's estimate goes stale: mastered ones are re-checked for forgetting and "
                "hopeless ones for progress"})
    promote_at: float = field(default=0.8, metadata={
        "help": "success-rate estimate above which a family's next harder setting joins the "
                "active set, in (0, 1]; 1 disables promotion"})
    min_evidence: float = field(default=8.0, metadata={
        "help": "decayed number of outcomes a family needs before it can be promoted, so one "
                "lucky streak does not promote it; below 1/(1-decay), the most evidence can hold"})
    max_bugs: int = field(default=3, metadata={
        "help": "the most bugs per task that promotion goes to (k)"})
    seed: int = field(default=0, metadata={"help": "seed of the sampler's random generator"})

    def __post_init__(self) -> None:
        if isinstance(self.prior, list):  # from JSON
            self.prior = tuple(self.prior)
        if not 0.0 < self.decay <= 1.0:
            raise UsageError(f"decay must be in (0, 1], got {self.decay}")
        if self.decay_scope not in DECAY_SCOPES:
            raise UsageError(f"decay_scope must be one of {', '.join(DECAY_SCOPES)}, got {self.decay_scope!r}")
        if (not isinstance(self.prior, tuple) or len(self.prior) != 2
                or not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in self.prior)):
            raise UsageError(f"prior must be two positive numbers (alpha0, beta0), got {self.prior!r}")
        if not 0.0 <= self.floor < 1.0:
            raise UsageError(f"floor must be in [0, 1), got {self.floor}")
        if not 0.0 < self.promote_at <= 1.0:
            raise UsageError(f"promote_at must be in (0, 1], got {self.promote_at}")
        if self.min_evidence < 0:
            raise UsageError(f"min_evidence must not be negative, got {self.min_evidence}")
        if isinstance(self.max_bugs, bool) or not isinstance(self.max_bugs, int) or self.max_bugs < 1:
            raise UsageError(f"max_bugs must be an integer >= 1, got {self.max_bugs!r}")
        if not isinstance(self.seed, int):
            raise UsageError(f"seed must be an integer, got {self.seed!r}")
        if self.promote_at < 1.0:
            alpha0, beta0 = self.prior
            if self.promote_at <= alpha0 / (alpha0 + beta0):
                raise UsageError(f"promote_at ({self.promote_at}) must be above the prior mean "
                                 f"alpha0/(alpha0+beta0) = {alpha0 / (alpha0 + beta0):.3g} of prior "
                                 f"{self.prior}, or families are promoted on no evidence")
            if self.decay < 1.0:
                # Decayed evidence saturates at 1/(1-decay) outcomes: a threshold past that, or a
                # posterior mean the prior keeps below promote_at, could never be reached.
                most = 1.0 / (1.0 - self.decay)
                if self.min_evidence >= most:
                    raise UsageError(f"min_evidence ({self.min_evidence}) must be below "
                                     f"1/(1-decay) = {most:.3g} with decay {self.decay}, the most "
                                     f"decayed evidence a family can hold")
                best = (alpha0 + most) / (alpha0 + beta0 + most)
                if self.promote_at >= best:
                    raise UsageError(f"promote_at ({self.promote_at}) must be below {best:.3g}, the "
                                     f"highest estimate decay {self.decay} and prior {self.prior} "
                                     f"allow (even a learner that always succeeds stays below it)")

    @property
    def memory(self) -> float:
        """Outcomes the decayed evidence effectively averages over, 1/(1-decay)."""
        return math.inf if self.decay == 1.0 else 1.0 / (1.0 - self.decay)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrontierConfig:
        from ..config import from_fields

        return from_fields(cls, data, "FrontierConfig field")


# --------------------------------------------------------------------------------------------
# The protocol both samplers satisfy
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Sampler(Protocol):
    """Chooses the families of the next tasks and learns from their outcomes."""

    @property
    def families(self) -> list[Family]:
        """The active families, in the order they joined."""
        ...

    def sample(self, n: int) -> list[Family]:
        """``n`` families (with repetition) for the next ``n`` tasks."""
        ...

    def update(self, family: Family, success: bool) -> Family | None:
        """Record one episode's outcome; returns a family that this made active, if any."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def save(self, path: str | os.PathLike) -> None: ...


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise UsageError(f"sample size must be a non-negative integer, got {n!r}")


def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _set_rng_state(rng: random.Random, state: list) -> None:
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


def _check_state(state: Mapping[str, Any], kind: str) -> None:
    if state.get("kind") != kind:
        raise UsageError(f"not a {kind} sampler state (kind {state.get('kind')!r})")
    if state.get("version") != _STATE_VERSION:
        raise UsageError(f"unsupported {kind} sampler state version {state.get('version')!r}")


def _save_json(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """Write atomically (temp file + fsync + rename) so a crash never leaves half a state."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_json(path: str | os.PathLike) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read sampler state {path}: {exc}") from exc


_S = TypeVar("_S", bound="_Saved")


class _Saved(abc.ABC):
    """``save`` and ``load`` for a sampler of ``kind``: its ``state_dict`` (see ``Sampler``) as
    JSON, written atomically, and back.  A subclass says how to build itself from a state."""

    kind = ""

    @classmethod
    @abc.abstractmethod
    def _from_state(cls: type[_S], state: Mapping[str, Any]) -> _S:
        """The sampler a saved ``state_dict`` describes."""

    def save(self, path: str | os.PathLike) -> None:
        _save_json(path, self.state_dict())

    @classmethod
    def load(cls: type[_S], path: str | os.PathLike) -> _S:
        """A sampler exactly as saved (its config or seed included)."""
        state = _read_json(path)
        _check_state(state, cls.kind)
        sampler = cls._from_state(state)
        sampler.load_state_dict(state)
        return sampler


# --------------------------------------------------------------------------------------------
# The frontier sampler
# --------------------------------------------------------------------------------------------


@dataclass
class _Arm:
    """Evidence about one family. ``successes``/``failures`` are decayed counts as of clock
    ``last``; under decay_scope "all" they decay further, lazily, by decay**(clock - last)."""

    successes: float = 0.0
    failures: float = 0.0
    last: int = 0
    updates: int = 0  # raw outcomes recorded (not decayed)
    draws: int = 0  # times sample() returned the family
    promoted: bool = False  # its harder family has been added (or it has none)


class FrontierSampler(_Saved):
    """Draws families in proportion to p(1-p) + floor; see the module docstring.

    ``families`` are the starting active set, typically the easiest setting per operator
    (``Family(op)``); harder settings join by promotion. An ``update`` for a family not in the
    set adds it (tasks from validation may land in a neighbouring family).
    """

    kind = "frontier"

    def __init__(self, families: Iterable[Family | str], config: FrontierConfig | None = None) -> None:
        self.config = config if config is not None else FrontierConfig()
        self._arms: dict[Family, _Arm] = {fam: _Arm() for fam in _unique(families)}
        self._clock = 0  # updates so far, all families together
        self._rng = random.Random(self.config.seed)

    # -- estimates ---------------------------------------------------------------------------

    @property
    def families(self) -> list[Family]:
        return list(self._arms)

    def _arm(self, family: Family | str) -> _Arm:
        fam = _family(family)
        try:
            return self._arms[fam]
        except KeyError:
            raise KeyError(f"family {fam.key} is not active") from None

    def _counts(self, arm: _Arm) -> tuple[float, float]:
        if self.config.decay_scope == "all" and self._clock > arm.last:
            factor = self.config.decay ** (self._clock - arm.last)
            return arm.successes * factor, arm.failures * factor
        return arm.successes, arm.failures

    def posterior(self, family: Family | str) -> tuple[float, float]:
        """The decayed Beta(alpha, beta) of the family's success rate."""
        s, f = self._counts(self._arm(family))
        alpha0, beta0 = self.config.prior
        return alpha0 + s, beta0 + f

    def estimate(self, family: Family | str) -> float:
        """Posterior mean of the family's success rate."""
        alpha, beta = self.posterior(family)
        return alpha / (alpha + beta)

    def evidence(self, family: Family | str) -> float:
        """Decayed number of outcomes behind the estimate."""
        return sum(self._counts(self._arm(family)))

    def probabilities(self) -> dict[Family, float]:
        """The draw distribution over the active families: floor/N + (1-floor) * w/sum(w),
        w = p(1-p) at the posterior mean p."""
        weights = {fam: (p := self.estimate(fam)) * (1.0 - p) for fam in self._arms}
        total = sum(weights.values())
        n = len(weights)
        floor = self.config.floor
        if total <= 0.0:  # cannot happen with a positive prior; stay well defined anyway
            return {fam: 1.0 / n for fam in weights}
        return {fam: floor / n + (1.0 - floor) * w / total for fam, w in weights.items()}

    # -- sampling and learning ---------------------------------------------------------------

    def sample(self, n: int) -> list[Family]:
        _check_n(n)
        if n == 0:
            return []
        probs = self.probabilities()
        drawn = self._rng.choices(list(probs), weights=list(probs.values()), k=n)
        for fam in drawn:
            self._arms[fam].draws += 1
        return drawn

    def update(self, family: Family | str, success: bool) -> Family | None:
        """Decay this family's evidence (or every family's, under decay_scope "all"), add the
        outcome, and promote the family if its estimate has passed ``promote_at``."""
        fam = _family(family)
        arm = self._arms.get(fam)
        if arm is None:
            log.debug("frontier: outcome for inactive family %s; adding it", fam.key)
            arm = self._arms[fam] = _Arm(last=self._clock)
        self._clock += 1
        if self.config.decay_scope == "all":
            factor = self.config.decay ** (self._clock - arm.last)
        else:
            factor = self.config.decay
        arm.successes = arm.successes * factor + (1.0 if success else 0.0)
        arm.failures = arm.failures * factor + (0.0 if success else 1.0)
        arm.last = self._clock
        arm.updates += 1
        return self._maybe_promote(fam, arm)

    def _maybe_promote(self, fam: Family, arm: _Arm) -> Family | None:
        cfg = self.config
        if arm.promoted or cfg.promote_at >= 1.0:
            return None
        if arm.successes + arm.failures < cfg.min_evidence or self.estimate(fam) <= cfg.promote_at:
            return None
        # Promotion is once per family: its successor then follows its own estimate. The family
        # itself stays active; its weight falls with p(1-p), and the floor keeps checking it.
        arm.promoted = True
        harder = fam.harder(cfg.max_bugs)
        if harder is None or harder in self._arms:
            return None
        self._arms[harder] = _Arm(last=self._clock)
        log.info("frontier: %s reached p=%.2f over %.1f outcomes; adding %s", fam.key,
                 self.estimate(fam), arm.successes + arm.failures, harder.key)
        return harder

    def summary(self) -> list[dict[str, Any]]:
        """One row per active family (for logs): key, level, p, evidence, draw probability."""
        probs = self.probabilities()
        return [{"family": fam.key, "level": fam.level, "p": self.estimate(fam),
                 "evidence": self.evidence(fam), "prob": probs[fam], "updates": arm.updates,
                 "draws": arm.draws, "promoted": arm.promoted} for fam, arm in self._arms.items()]

    # -- persistence -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": _STATE_VERSION,
            "config": {**asdict(self.config), "prior": list(self.config.prior)},
            "clock": self._clock,
            "families": [{"family": fam.key, **asdict(arm)} for fam, arm in self._arms.items()],
            "rng": _rng_state(self._rng),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore estimates, active set, clock and RNG. ``self.config`` is kept (a resumed run
        may change settings); a differing saved config is logged."""
        _check_state(state, self.kind)
        saved = FrontierConfig.from_dict(state["config"])
        if saved != self.config:
            log.warning("frontier: resuming with a config that differs from the saved one (%s vs %s)",
                        self.config, saved)
        arms: dict[Family, _Arm] = {}
        for row in state["families"]:
            row = dict(row)
            fam = Family.from_key(row.pop("family"))
            arms[fam] = _Arm(**row)
        if not arms:
            raise UsageError("frontier sampler state has no families")
        self._arms = arms
        self._clock = int(state["clock"])
        _set_rng_state(self._rng, state["rng"])

    @classmethod
    def _from_state(cls, state: Mapping[str, Any]) -> FrontierSampler:
        return cls([row["family"] for row in state["families"]], FrontierConfig.from_dict(state["config"]))


# --------------------------------------------------------------------------------------------
# The uniform baseline
# --------------------------------------------------------------------------------------------


class UniformSampler(_Saved):
    """Draws uniformly from a fixed set of families; outcomes are counted, never used.

    For an ablation, give it the families the frontier could reach, e.g.
    ``[f for op in ops for f in Family(op).chain(max_bugs)]``.
    """

    kind = "uniform"

    def __init__(self, families: Iterable[Family | str], seed: int = 0) -> None:
        self._families = _unique(families)
        self._counts: dict[Family, list[int]] = {fam: [0, 0] for fam in self._families}  # successes, failures
        self.seed = seed
        self._rng = random.Random(seed)

    @property
    def families(self) -> list[Family]:
        return list(self._families)

    def sample(self, n: int) -> list[Family]:
        _check_n(n)
        return self._rng.choices(self._families, k=n) if n else []

    def update(self, family: Family | str, success: bool) -> Family | None:
        counts = self._counts.setdefault(_family(family), [0, 0])
        counts[0 if success else 1] += 1
        return None

    def estimate(self, family: Family | str) -> float:
        """Plain success rate (Laplace-smoothed) of the recorded outcomes."""
        s, f = self._counts.get(_family(family), (0, 0))
        return (s + 1) / (s + f + 2)

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": _STATE_VERSION,
            "seed": self.seed,
            "families": [fam.key for fam in self._families],
            "counts": {fam.key: list(c) for fam, c in self._counts.items()},
            "rng": _rng_state(self._rng),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.kind)
        self._families = _unique(state["families"])
        self._counts = {Family.from_key(k): [int(s), int(f)] for k, (s, f) in state["counts"].items()}
        self.seed = int(state["seed"])
        _set_rng_state(self._rng, state["rng"])

    @classmethod
    def _from_state(cls, state: Mapping[str, Any]) -> UniformSampler:
        return cls(state["families"], seed=int(state["seed"]))


def load_sampler(path: str | os.PathLike) -> FrontierSampler | UniformSampler:
    """Whichever sampler ``path`` holds (by its ``kind``), exactly as saved."""
    kind = _read_json(path).get("kind")
    for cls in (FrontierSampler, UniformSampler):
        if cls.kind == kind:
            return cls.load(path)
    raise UsageError(f"{path}: not a sampler state (kind {kind!r})")
