"""Metrics over ``frognano eval`` episode rows: resolve rate, pass@k, pass^k, SR_k and diagnostics.

``frognano eval`` runs a solver several times ("episodes") on each bug task and writes one JSON
row per episode. ``summarize`` turns those rows into a ``Summary``: one ``Stats`` for all rows,
one per family key (``compare-b1-function-d0``) and one per value of each difficulty feature
(``operator=compare``, ``bugs=1``, ``hint=function``, ``distance=0``), so a table can show how
each knob alone moves the numbers.

Estimators, named exactly:

* resolve rate with a Wilson score interval (Wilson 1927), which stays inside [0, 1] and keeps
  sensible coverage at the small n and extreme rates evaluation runs produce;
* pass@k, unbiased (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1):
  per task with n attempts and c successes, 1 - C(n-c, k) / C(n, k), averaged over tasks;
* pass^k (Yao et al. 2024, tau-bench): C(c, k) / C(n, k), the chance that k attempts drawn
  without replacement *all* succeed: a consistency measure, where pass@k measures coverage;
* SR_k: the share of episodes resolved within k model turns (0 turns: the search alone solved it).

How a model spends its episodes, the baseline a trainer starts from: the invalid-call rate
(malformed calls per tool call), the share of model episodes with any invalid call, the loop
rate (model episodes the harness ended for repeating themselves, ``looping``), how every model
episode ended (``ends``: submitted, turn_budget, ...), and tokens and seconds per episode.

Rows with status "error" are infrastructure failures, not attempts: they are counted as errors
and left out of every rate, mean and count of attempts, so a flaky sandbox does not read as a
weak model. Only the standard library is used, so the CLI imports this cheaply.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UsageError
from ..synthesis.frontier import HINTS, Family

__all__ = ["DEFAULT_TURN_KS", "FEATURES", "STATUSES", "UNKNOWN", "Z95", "Episode", "Stats", "Summary", "episode_facts",
           "episode_metrics", "latest",
           "pass_at_k", "pass_hat_k", "summarize", "turn_ks", "wilson"]

#: The normal quantile for a two-sided 95% interval, Phi^-1(0.975).
Z95 = 1.959963984540054
STATUSES: tuple[str, ...] = ("resolved", "unresolved", "error")
#: The family features grouped on separately, in ``Family`` field order.
FEATURES: tuple[str, ...] = ("operator", "bugs", "hint", "distance")
#: Turn budgets for SR_k before capping at the largest turn count seen (doubling: cheap to read).
DEFAULT_TURN_KS: tuple[int, ...] = (1, 2, 4, 8, 16)
#: The feature value of a family key that ``Family.from_key`` rejects.
UNKNOWN = "?"
#: The end of a model episode that repeated itself (``repair.agent.EpisodeStatus.LOOPING``;
#: spelled out so that this module stays free of the repair package).
LOOPING = "looping"
_FIELDS = ("instance_id", "episode", "family", "status", "turns", "tokens_in", "tokens_out", "seconds",
           "tool_calls", "invalid_calls", "identical_retries", "met_error", "ever_passed", "has_patch",
           "regressions")


# --------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial rate (Wilson 1927); 8/10 gives (0.4902, 0.9433).

    With n == 0 there is no evidence, so the interval is the whole of (0.0, 1.0) rather than an
    error: a group with only errored episodes still renders in a table.
    """
    if not 0 <= successes <= n:
        raise ValueError(f"wilson needs 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    p, z2 = successes / n, z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # Clamp: at p = 0 or 1 the bound is exactly 0 or 1 in theory, off by an ulp in floats.
    return (max(0.0, center - half), min(1.0, center + half))


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), the paper's numerically stable form, which
    never forms the huge binomials.
    """
    _check(n, c, k)
    if n - c < k:  # every k-subset holds a success
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one task (tau-bench, Yao et al. 2024): C(c, k) / C(n, k), as
    prod_{i=0}^{k-1} (c-i)/(n-i), the chance that k attempts drawn without replacement all succeed."""
    _check(n, c, k)
    return math.prod((c - i) / (n - i) for i in range(k))  # a factor is 0 when c < k


def turn_ks(max_turns: int, ks: Iterable[int] = DEFAULT_TURN_KS) -> tuple[int, ...]:
    """The SR_k budgets: ``ks`` below ``max_turns``, then ``max_turns`` itself, so the last
    column is always the plain resolve rate and no column repeats it."""
    return tuple(sorted({k for k in ks if k < max_turns} | {max_turns}))


# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Episode:
    """One episode row, checked; ``from_row`` reads the JSON dict ``frognano eval`` writes."""

    instance_id: str
    episode: int
    family: str
    status: str
    turns: int = 0
    tokens: int = 0  # tokens_in + tokens_out
    tokens_out: int = 0  # the model's own (generated) tokens
    seconds: float = 0.0
    tool_calls: int = 0
    invalid_calls: int = 0
    identical_retries: int = 0
    met_error: bool = False
    ever_passed: bool = False
    has_patch: bool = False
    regressed: bool = False  # the final patch broke a PASS_TO_PASS test
    # How the model episode ended (``EpisodeStatus``: submitted, turn_budget, looping, ...);
    # None where no model episode ran (the search's fix, an error row, or rows written before
    # eval recorded it).
    end: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Episode:
        # Strict on purpose: a renamed field would otherwise show up as a silent None rate.
        missing = [name for name in _FIELDS if name not in row]
        if missing:
            raise UsageError(f"episode row lacks {', '.join(missing)}: {str(dict(row))[:200]}")
        if row["status"] not in STATUSES:
            raise UsageError(f"episode status must be one of {', '.join(STATUSES)}, got {row['status']!r} "
                             f"(instance_id {row['instance_id']!r}, episode {row['episode']!r})")
        return cls(str(row["instance_id"]), int(row["episode"]), str(row["family"]), row["status"],
                   turns=int(row["turns"]), tokens=int(row["tokens_in"]) + int(row["tokens_out"]),
                   tokens_out=int(row["tokens_out"]),
                   seconds=float(row["seconds"]), tool_calls=int(row["tool_calls"]),
                   invalid_calls=int(row["invalid_calls"]), identical_retries=int(row["identical_retries"]),
                   met_error=bool(row["met_error"]), ever_passed=bool(row["ever_passed"]),
                   has_patch=bool(row["has_patch"]), regressed=bool(row["regressions"]),
                   end=row.get("episode_status") or None)


def latest(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows de-duplicated by (instance_id, episode), the last one winning.

    A resumed run re-does errored episodes and appends the new rows, so the last row is the
    current one. Each survivor keeps the position of its key's first row, so the output order
    is the order episodes were first scheduled.
    """
    by_key: dict[tuple[Any, Any], Mapping[str, Any]] = {}
    for row in rows:
        # .get: a row without these fields is reported by Episode.from_row, by name.
        by_key[(row.get("instance_id"), row.get("episode"))] = row  # re-assigning keeps the first position
    return list(by_key.values())


def _features(family: str) -> dict[str, str]:
    """``family``'s feature values, all ``UNKNOWN`` when it is not a valid family key (even if
    part of it would parse: a half-parsed key most likely means a format change, not a real value)."""
    try:
        fam = Family.from_key(family)
    except UsageError:
        return {name: UNKNOWN for name in FEATURES}
    return {name: str(getattr(fam, name)) for name in FEATURES}


def _feature_order(group: str) -> tuple:
    """Sort key for "feature=value" names: feature order, then natural value order, "?" last."""
    name, _, value = group.partition("=")
    if value == UNKNOWN:
        natural: Any = ()
    elif name == "hint":
        natural = (HINTS.index(value),)
    elif name in ("bugs", "distance"):
        natural = (int(value),)
    else:
        natural = (value,)
    return (FEATURES.index(name), value == UNKNOWN, natural)


def _family_order(key: str) -> tuple:
    try:
        return (0, Family.from_key(key), "")
    except UsageError:
        return (1, None, key)  # unparseable keys last, alphabetically; Family is never compared to None


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------


@dataclass
class Stats:
    """The metrics of one group of episodes. Rates are None where their denominator is empty
    (e.g. ``regression_rate`` with no patched episode): "not measured" must not read as 0."""

    name: str
    episodes: int  # non-error episodes: the attempts
    errors: int  # infrastructure failures, in no other field
    tasks: int  # distinct instance_ids with at least one attempt
    resolved: int
    resolve_rate: float | None
    resolve_ci: tuple[float, float]  # 95% Wilson; (0.0, 1.0) with no attempts
    pass_at: dict[int, float] = field(default_factory=dict)  # k -> mean pass@k over tasks with n >= k
    pass_hat: dict[int, float] = field(default_factory=dict)  # k -> mean pass^k over the same tasks
    pass_tasks: dict[int, int] = field(default_factory=dict)  # k -> how many tasks entered that k
    sr_at: dict[int, float] = field(default_factory=dict)  # k -> share resolved within k turns
    error_recovery_rate: float | None = None  # resolved among episodes that met an error
    regression_rate: float | None = None  # patched episodes whose patch broke PASS_TO_PASS
    lost_solution_rate: float | None = None  # unresolved among episodes that once passed
    identical_retry_rate: float | None = None  # identical retries per tool call
    invalid_call_rate: float | None = None  # malformed calls per tool call
    model_episodes: int = 0  # attempts in which a model episode ran (the denominator below)
    invalid_episode_rate: float | None = None  # model episodes with at least one malformed call
    loop_rate: float | None = None  # model episodes ended for repeating themselves ("looping")
    ends: dict[str, int] = field(default_factory=dict)  # how the model episodes ended, commonest first
    mean_tokens: float | None = None  # tokens in + out per episode
    mean_tokens_out: float | None = None  # generated tokens per episode
    mean_turns: float | None = None
    mean_seconds: float | None = None
    total_seconds: float = 0.0  # over attempts only, so seconds_per_task = total_seconds / tasks
    seconds_per_task: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able dict: floats rounded to 4 places, k keys as strings, None kept."""
        return _plain(asdict(self))


@dataclass
class Summary:
    """``overall`` plus one ``Stats`` per family key and per "feature=value" (FEATURES order)."""

    overall: Stats
    families: dict[str, Stats]
    features: dict[str, Stats]
    ks: tuple[int, ...]  # the pass@k / pass^k ks
    ks_turns: tuple[int, ...]  # the SR_k ks

    def to_json(self) -> dict[str, Any]:
        return {"ks": list(self.ks), "ks_turns": list(self.ks_turns), "overall": self.overall.to_json(),
                "families": {name: s.to_json() for name, s in self.families.items()},
                "features": {name: s.to_json() for name, s in self.features.items()}}


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _share(episodes: Sequence[Episode], hit: Callable[[Episode], bool]) -> float | None:
    """Share of ``episodes`` for which ``hit`` holds; None for no episodes."""
    return _ratio(sum(1 for e in episodes if hit(e)), len(episodes))


def _ks(given: Iterable[int] | None, default: Iterable[int], what: str, least: int) -> tuple[int, ...]:
    ks = list(default if given is None else given)
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, int) or k < least]
    if bad:
        raise UsageError(f"{what} must be integers >= {least}, got {bad}")
    return tuple(sorted(set(ks)))


def _stats(name: str, rows: Sequence[Episode], ks: Sequence[int], ks_turns: Sequence[int]) -> Stats:
    done = [e for e in rows if e.status != "error"]
    n, resolved = len(done), sum(e.status == "resolved" for e in done)
    per_task: dict[str, list[int]] = {}  # instance_id -> [attempts, resolved]
    for e in done:
        counts = per_task.setdefault(e.instance_id, [0, 0])
        counts[0] += 1
        counts[1] += e.status == "resolved"
    stats = Stats(name, n, len(rows) - n, len(per_task), resolved, _ratio(resolved, n), wilson(resolved, n))
    for k in ks:
        entered = [(t, c) for t, c in per_task.values() if t >= k]  # n < k: the estimator is undefined
        if entered:
            stats.pass_tasks[k] = len(entered)
            stats.pass_at[k] = sum(pass_at_k(t, c, k) for t, c in entered) / len(entered)
            stats.pass_hat[k] = sum(pass_hat_k(t, c, k) for t, c in entered) / len(entered)
    if n:
        stats.sr_at = {k: sum(e.status == "resolved" and e.turns <= k for e in done) / n for k in ks_turns}
    stats.error_recovery_rate = _share([e for e in done if e.met_error], lambda e: e.status == "resolved")
    stats.regression_rate = _share([e for e in done if e.has_patch], lambda e: e.regressed)
    stats.lost_solution_rate = _share([e for e in done if e.ever_passed], lambda e: e.status != "resolved")
    calls = sum(e.tool_calls for e in done)
    stats.identical_retry_rate = _ratio(sum(e.identical_retries for e in done), calls)
    stats.invalid_call_rate = _ratio(sum(e.invalid_calls for e in done), calls)
    model = [e for e in done if e.end is not None]
    stats.model_episodes = len(model)
    stats.invalid_episode_rate = _share(model, lambda e: e.invalid_calls > 0)
    stats.loop_rate = _share(model, lambda e: e.end == LOOPING)
    ends: dict[str, int] = {}
    for e in model:
        ends[e.end] = ends.get(e.end, 0) + 1  # type: ignore[index]
    stats.ends = dict(sorted(ends.items(), key=lambda kv: (-kv[1], kv[0])))
    stats.mean_tokens = _ratio(sum(e.tokens for e in done), n)
    stats.mean_tokens_out = _ratio(sum(e.tokens_out for e in done), n)
    stats.mean_turns = _ratio(sum(e.turns for e in done), n)
    stats.total_seconds = float(sum(e.seconds for e in done))
    stats.mean_seconds = _ratio(stats.total_seconds, n)
    stats.seconds_per_task = _ratio(stats.total_seconds, len(per_task))
    return stats


def summarize(rows: Iterable[Mapping[str, Any]], ks: Iterable[int] | None = None,
              ks_turns: Iterable[int] | None = None) -> Summary:
    """Metrics overall, per family key and per feature value of ``rows`` (episode dicts).

    Rows go through ``latest`` first, so a resumed run's appended rows count once. ``ks``
    defaults to 1..the most attempts any task has; ``ks_turns`` to ``turn_ks`` of the most turns
    any attempt took. Both are shared by every group, so a group's columns line up with the rest.
    """
    episodes = [Episode.from_row(row) for row in latest(rows)]
    done = [e for e in episodes if e.status != "error"]
    attempts: dict[str, int] = {}
    for e in done:
        attempts[e.instance_id] = attempts.get(e.instance_id, 0) + 1
    ks_ = _ks(ks, range(1, max(attempts.values(), default=0) + 1), "pass@k ks", 1)
    turns_default = turn_ks(max(e.turns for e in done)) if done else ()
    ks_turns_ = _ks(ks_turns, turns_default, "SR_k turn budgets", 0)

    families: dict[str, list[Episode]] = {}
    features: dict[str, list[Episode]] = {}
    for e in episodes:
        families.setdefault(e.family, []).append(e)
        for name, value in _features(e.family).items():
            features.setdefault(f"{name}={value}", []).append(e)
    return Summary(
        overall=_stats("all", episodes, ks_, ks_turns_),
        families={key: _stats(key, families[key], ks_, ks_turns_) for key in sorted(families, key=_family_order)},
        features={key: _stats(key, features[key], ks_, ks_turns_) for key in sorted(features, key=_feature_order)},
        ks=ks_, ks_turns=ks_turns_)


# -- the held-out evaluation's per-episode facts (training/heldout.py ``evaluate_heldout``) ------
def episode_facts(episode, toolbox, resolved: bool) -> dict[str, Any]:
    """What one held-out episode contributes to ``episode_metrics``: the same facts ``frognano
    eval`` writes to its rows (``met_error``: a tool error or a failing ``run_tests``)."""
    calls = [t.call for t in episode.turns]
    return {"resolved": bool(resolved), "met_error": bool(toolbox.errors or toolbox.failed_runs),
            "turns": len(episode.turns), "invalid": int(episode.malformed),
            "tokens": int(episode.tokens_in) + int(episode.tokens_out),
            "path": " > ".join("?" if c is None else c["name"] for c in calls)}


def episode_metrics(facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The seed's episode metrics over held-out episodes: the error-recovery rate (resolved
    among the episodes that met an error; None when none did), the invalid-call rate (malformed
    calls per turn), turns and tokens per resolved episode (None without one), and the commonest
    call sequences (what the policy does)."""
    met = [f for f in facts if f["met_error"]]
    won = [f for f in facts if f["resolved"]]
    turns = sum(f["turns"] for f in facts)
    paths: dict[str, int] = {}
    for f in facts:
        paths[f["path"]] = paths.get(f["path"], 0) + 1
    return {"met_error": len(met), "error_recovery_rate": _ratio(sum(f["resolved"] for f in met), len(met)),
            "invalid_call_rate": _ratio(sum(f["invalid"] for f in facts), turns),
            "turns_per_resolved": _ratio(sum(f["turns"] for f in won), len(won)),
            "tokens_per_resolved": _ratio(sum(f["tokens"] for f in won), len(won)),
            "paths": dict(sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))[:5])}
