"""Evaluation metrics against hand-computed values: estimators, grouping, errors, dedupe, JSON."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from frognano.errors import UsageError
from frognano.training.metrics import (
    UNKNOWN,
    Episode,
    Summary,
    latest,
    pass_at_k,
    pass_hat_k,
    summarize,
    turn_ks,
    wilson,
)

from ..conftest import raises_naming

approx = pytest.approx


def row(instance_id: str, episode: int, status: str = "unresolved", family: str = "compare-b1-function-d0",
        **fields) -> dict:
    """A complete episode row: 4 calls, 110 tokens, 10 s, no patch, unless ``fields`` say otherwise."""
    base = {"instance_id": instance_id, "episode": episode, "family": family, "status": status, "turns": 1,
            "tokens_in": 100, "tokens_out": 10, "seconds": 10.0, "tool_calls": 4, "invalid_calls": 0,
            "identical_retries": 0, "met_error": False, "ever_passed": status == "resolved",
            "has_patch": status == "resolved", "regressions": []}
    return base | fields


# Task A: 5 attempts, 2 resolved (+1 error); B: 2 attempts, 1 resolved; C: 1 attempt, solved by the
# search (0 turns, no calls, no tokens); D: only an error, under an unparseable family. The error
# rows carry huge numbers that would show in any mean or rate that wrongly counted them.
ERROR = {"turns": 9, "tokens_in": 10**6, "seconds": 999.0, "tool_calls": 100, "identical_retries": 50,
         "invalid_calls": 50, "met_error": True, "has_patch": True, "regressions": ["t::x"]}
ROWS = [
    row("A", 0, "resolved", turns=1, met_error=True),
    row("A", 1, "resolved", turns=3),
    row("A", 2, turns=4, met_error=True, identical_retries=2, invalid_calls=1),
    row("A", 3, turns=4, has_patch=True, regressions=["tests/test_a.py::test_keep"]),
    row("A", 4, turns=2, ever_passed=True),
    row("A", 5, "error", **ERROR),
    row("B", 0, "resolved", family="compare-b1-file-d1", turns=2),
    row("B", 1, family="compare-b1-file-d1", turns=5, identical_retries=1),
    row("C", 0, "resolved", family="arith-b2-function-d0", turns=0, tokens_in=0, tokens_out=0, seconds=1.0,
        tool_calls=0),
    row("D", 0, "error", family="weird", **ERROR),
]


@pytest.fixture(scope="module")
def summary() -> Summary:
    return summarize(ROWS)


# -- estimators --------------------------------------------------------------------------------


def test_wilson_known_values():
    assert wilson(8, 10) == (approx(0.4902, abs=5e-5), approx(0.9433, abs=5e-5))
    assert wilson(4, 8) == (approx(0.2152, abs=5e-5), approx(0.7848, abs=5e-5))
    # At 0 successes the lower bound is exactly 0 and the upper z^2 / (n + z^2).
    z2 = 1.959963984540054 ** 2
    assert wilson(0, 5) == (0.0, approx(z2 / (5 + z2)))
    assert wilson(5, 5) == (approx(5 / (5 + z2)), 1.0)
    assert wilson(0, 0) == (0.0, 1.0)  # no evidence: the whole interval
    assert wilson(8, 10, z=0.0) == (approx(0.8), approx(0.8))


def test_wilson_rejects_impossible_counts():
    for successes, n in [(3, 2), (-1, 2)]:
        with pytest.raises(ValueError):
            wilson(successes, n)


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 2) == approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 3) == approx(0.9)  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert pass_at_k(5, 2, 4) == 1.0  # only 3 failures: every 4-subset holds a success
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 2, 1) == approx(0.4)  # pass@1 is c/n


def test_pass_at_k_matches_binomials_exactly():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
                assert pass_hat_k(n, c, k) == approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


def test_estimators_stay_stable_where_binomials_are_huge():
    # C(999, 500) / C(1000, 500) = 500/1000, though both binomials have ~300 digits.
    assert pass_at_k(1000, 1, 500) == approx(0.5)
    assert pass_hat_k(1000, 999, 500) == approx(0.5)


def test_pass_hat_k_hand_values():
    assert pass_hat_k(5, 2, 2) == approx(0.1)  # C(2,2)/C(5,2) = 1/10
    assert pass_hat_k(5, 2, 3) == 0.0
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(5, 3, 1) == approx(0.6)


def test_estimators_reject_k_beyond_attempts():
    for fn in (pass_at_k, pass_hat_k):
        with pytest.raises(ValueError):
            fn(2, 1, 3)
        with pytest.raises(ValueError):
            fn(2, 1, 0)


def test_turn_ks_caps_at_and_includes_the_max():
    assert turn_ks(20) == (1, 2, 4, 8, 16, 20)
    assert turn_ks(16) == (1, 2, 4, 8, 16)
    assert turn_ks(5) == (1, 2, 4, 5)
    assert turn_ks(1) == (1,)
    assert turn_ks(0) == (0,)  # every episode solved by the search alone


# -- rows ----------------------------------------------------------------------------------------


def test_latest_keeps_the_last_row_at_the_first_position():
    first, other, redo = row("A", 0, "error"), row("A", 1), row("A", 0, "resolved")
    assert latest([first, other, redo]) == [redo, other]
    assert latest([]) == []


def test_summarize_counts_a_redone_episode_once():
    rows = [row("A", 0, "resolved"), row("A", 1, "error"), row("A", 1, "unresolved")]
    s = summarize(rows).overall
    assert (s.episodes, s.errors, s.resolved, s.resolve_rate) == (2, 0, 1, 0.5)
    assert summarize([*rows, row("A", 1, "resolved")]).overall.resolved == 2  # the newest row wins


def test_episode_from_row_reads_every_field():
    e = Episode.from_row(row("A", 3, "resolved", turns=2, tokens_in=7, tokens_out=5, regressions=["t"]))
    assert e == Episode("A", 3, "compare-b1-function-d0", "resolved", turns=2, tokens=12, tokens_out=5, seconds=10.0,
                        tool_calls=4, ever_passed=True, has_patch=True, regressed=True)


def test_bad_rows_are_named():
    incomplete = row("A", 0)
    del incomplete["tool_calls"], incomplete["ever_passed"]
    with raises_naming(UsageError, ["tool_calls", "ever_passed"]):
        summarize([incomplete])
    with raises_naming(UsageError, ["instance_id"]):
        summarize([{k: v for k, v in row("A", 0).items() if k != "instance_id"}])
    with raises_naming(UsageError, ["'crashed'", "resolved", "'A'"]):
        summarize([row("A", 0, "crashed")])


# -- overall ---------------------------------------------------------------------------------------


def test_overall_counts_and_rate_exclude_errors(summary):
    s = summary.overall
    assert (s.name, s.episodes, s.errors, s.tasks, s.resolved) == ("all", 8, 2, 3, 4)  # D has no attempt
    assert s.resolve_rate == 0.5
    assert s.resolve_ci == wilson(4, 8)


def test_overall_pass_at_k_and_pass_hat_k(summary):
    assert summary.ks == (1, 2, 3, 4, 5)  # A has the most attempts (the error row is not one)
    s = summary.overall
    assert s.pass_tasks == {1: 3, 2: 2, 3: 1, 4: 1, 5: 1}  # a task enters k only with n >= k
    # pass@1: A 2/5, B 1/2, C 1/1. pass@2: A 0.7, B 1 (one failure cannot fill 2 draws).
    assert s.pass_at == {1: approx((0.4 + 0.5 + 1) / 3), 2: approx(0.85), 3: approx(0.9), 4: 1.0, 5: 1.0}
    # pass^2: A C(2,2)/C(5,2) = 0.1, B C(1,2)/C(2,2) = 0.
    assert s.pass_hat == {1: approx((0.4 + 0.5 + 1) / 3), 2: approx(0.05), 3: 0.0, 4: 0.0, 5: 0.0}


def test_overall_sr_at_k(summary):
    # Max turns among attempts is 5 (B, 1); the error rows' 9 turns do not count.
    assert summary.ks_turns == (1, 2, 4, 5)
    # Resolved with turns: C 0, A 1, B 2, A 3.
    assert summary.overall.sr_at == {1: 2 / 8, 2: 3 / 8, 4: 4 / 8, 5: 4 / 8}


def test_overall_diagnostic_rates(summary):
    s = summary.overall
    assert s.error_recovery_rate == 0.5  # met an error: A0 resolved, A2 not
    assert s.regression_rate == approx(1 / 5)  # patched: 4 resolved + A3, which broke a test
    assert s.lost_solution_rate == approx(1 / 5)  # once passed: 4 resolved + A4, which ended unresolved
    assert s.identical_retry_rate == approx(3 / 28)  # 7 attempts with 4 calls each; C made none
    assert s.invalid_call_rate == approx(1 / 28)


def test_overall_costs(summary):
    s = summary.overall
    assert s.mean_tokens == approx(7 * 110 / 8)
    assert s.mean_turns == approx((1 + 3 + 4 + 4 + 2 + 2 + 5 + 0) / 8)
    assert s.total_seconds == approx(71.0)
    assert s.mean_seconds == approx(71.0 / 8)
    assert s.seconds_per_task == approx(71.0 / 3)


def test_given_ks_are_used_and_skipped_where_no_task_has_enough_attempts():
    s = summarize(ROWS, ks=[10, 2], ks_turns=[3, 0])
    assert (s.ks, s.ks_turns) == ((2, 10), (0, 3))
    assert s.overall.pass_at == {2: approx(0.85)}
    assert s.overall.pass_tasks == {2: 2}
    assert s.overall.sr_at == {0: 1 / 8, 3: 4 / 8}
    with raises_naming(UsageError, ["pass@k", "0"]):
        summarize(ROWS, ks=[0, 1])
    with raises_naming(UsageError, ["SR_k", "-1"]):
        summarize(ROWS, ks_turns=[-1])
    with raises_naming(UsageError, ["pass@k", "'2'"]):
        summarize(ROWS, ks=[1, "2"])


# -- groups ----------------------------------------------------------------------------------------


def test_family_groups_in_difficulty_order_unknown_last(summary):
    # Levels: compare-b1-function-d0 0, arith-b2-function-d0 1, compare-b1-file-d1 2.
    assert list(summary.families) == ["compare-b1-function-d0", "arith-b2-function-d0", "compare-b1-file-d1",
                                      "weird"]
    a = summary.families["compare-b1-function-d0"]
    assert (a.name, a.episodes, a.errors, a.tasks, a.resolved) == ("compare-b1-function-d0", 5, 1, 1, 2)
    assert a.pass_at == {1: approx(0.4), 2: approx(0.7), 3: approx(0.9), 4: 1.0, 5: 1.0}
    assert a.sr_at == {1: 1 / 5, 2: 1 / 5, 4: 2 / 5, 5: 2 / 5}  # the shared ks_turns, not A's own max


def test_feature_groups_split_each_knob(summary):
    assert list(summary.features) == [
        "operator=arith", "operator=compare", f"operator={UNKNOWN}", "bugs=1", "bugs=2", f"bugs={UNKNOWN}",
        "hint=function", "hint=file", f"hint={UNKNOWN}", "distance=0", "distance=1", f"distance={UNKNOWN}"]
    compare = summary.features["operator=compare"]  # A and B
    assert (compare.episodes, compare.errors, compare.tasks, compare.resolved) == (7, 1, 2, 3)
    assert compare.pass_at == {1: approx(0.45), 2: approx(0.85), 3: approx(0.9), 4: 1.0, 5: 1.0}
    function = summary.features["hint=function"]  # A and C
    assert (function.episodes, function.tasks, function.resolved) == (6, 2, 3)
    assert function.pass_at[1] == approx(0.7)
    assert function.pass_hat[2] == approx(0.1)  # only A has 2 attempts
    assert summary.features["distance=1"].resolve_rate == 0.5  # B
    assert summary.features["bugs=2"].seconds_per_task == 1.0  # C
    # Each feature partitions the rows: its groups add up to the whole.
    for feature in ("operator", "bugs", "hint", "distance"):
        groups = [s for name, s in summary.features.items() if name.startswith(feature + "=")]
        assert sum(s.episodes for s in groups) == 8 and sum(s.errors for s in groups) == 2


def test_a_group_with_only_errors_measures_nothing(summary):
    for s in (summary.families["weird"], summary.features[f"hint={UNKNOWN}"]):
        assert (s.episodes, s.errors, s.tasks, s.resolved) == (0, 1, 0, 0)
        assert s.resolve_rate is None and s.resolve_ci == (0.0, 1.0)
        assert s.pass_at == s.pass_hat == s.pass_tasks == s.sr_at == {}
        assert None is s.error_recovery_rate is s.regression_rate is s.lost_solution_rate
        assert None is s.identical_retry_rate is s.invalid_call_rate
        assert None is s.mean_tokens is s.mean_turns is s.mean_seconds is s.seconds_per_task
        assert s.total_seconds == 0.0


def test_an_invalid_family_key_has_unknown_features_but_its_own_family_group():
    s = summarize([row("A", 0, family="compare-b1-vague-d0"), row("B", 0, "resolved", family="compare-b1-file-d0")])
    assert list(s.families) == ["compare-b1-file-d0", "compare-b1-vague-d0"]  # valid keys first
    assert s.features[f"operator={UNKNOWN}"].episodes == 1 and s.features["operator=compare"].episodes == 1
    assert s.features["hint=file"].resolved == 1


def test_rates_without_a_denominator_are_none():
    s = summarize([row("C", 0, "unresolved", turns=0, tool_calls=0)]).overall
    assert s.resolve_rate == 0.0 and s.sr_at == {0: 0.0}
    assert None is s.error_recovery_rate is s.regression_rate is s.lost_solution_rate  # no such episode
    assert None is s.identical_retry_rate is s.invalid_call_rate  # no tool call


def test_no_rows_at_all():
    s = summarize([])
    assert (s.ks, s.ks_turns, s.families, s.features) == ((), (), {}, {})
    assert (s.overall.episodes, s.overall.resolve_rate, s.overall.resolve_ci) == (0, None, (0.0, 1.0))


# -- JSON ------------------------------------------------------------------------------------------


def test_to_json_is_plain_rounded_and_keeps_none(summary):
    out = summary.to_json()
    assert json.loads(json.dumps(out)) == out  # only JSON types: str keys, lists, no tuples
    assert list(out) == ["ks", "ks_turns", "overall", "families", "features"]
    overall = out["overall"]
    assert overall["pass_at"] == {"1": 0.6333, "2": 0.85, "3": 0.9, "4": 1.0, "5": 1.0}
    assert overall["resolve_ci"] == [0.2152, 0.7848]
    assert overall["identical_retry_rate"] == 0.1071
    assert overall["sr_at"] == {"1": 0.25, "2": 0.375, "4": 0.5, "5": 0.5}
    assert (overall["episodes"], overall["errors"], overall["tasks"]) == (8, 2, 3)
    assert out["families"]["weird"]["resolve_rate"] is None
    assert list(out["features"]) == list(summary.features)


def test_import_stays_cheap():
    code = "import sys, frognano.training.metrics; print([m for m in ('numpy', 'torch', 'pandas') if m in sys.modules])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
