"""The frontier sampler against simulated learners with known success curves, and its baseline."""

from __future__ import annotations

import collections
import json
import math
import random

import pytest

from frognano.errors import UsageError
from frognano.synthesis import (
    HINTS,
    Family,
    FrontierConfig,
    FrontierSampler,
    Sampler,
    UniformSampler,
    load_sampler,
)

from ..conftest import raises_naming

OPS = ["compare", "arith", "bound"]
UNIVERSE = [fam for op in OPS for fam in Family(op).chain()]  # what promotion can reach


# -- families ----------------------------------------------------------------------------------


def test_family_key_round_trips_and_chain_steps_one_level_at_a_time():
    fam = Family("remove_statement", 2, "file", 1)
    assert fam.key == "remove_statement-b2-file-d1"
    assert Family.from_key(fam.key) == fam
    chain = Family("compare").chain(max_bugs=3)
    assert [f.level for f in chain] == list(range(7))
    assert chain[-1] == Family("compare", 3, "test", 2) and chain[-1].harder(3) is None
    # Every step is harder in exactly one knob and never easier in any.
    for a, b in zip(chain, chain[1:]):
        assert b.bugs >= a.bugs and HINTS.index(b.hint) >= HINTS.index(a.hint) and b.distance >= a.distance
        assert a < b
    assert Family("compare").chain(max_bugs=1)[-1] == Family("compare", 1, "test", 2)
    assert sorted([Family("b", 2), Family("a", hint="test"), Family("a")])[0] == Family("a")
    assert Family.bucket(5) == 2 and Family.bucket(1) == 1


@pytest.mark.parametrize("kwargs, word", [
    (dict(operator=""), "operator"), (dict(operator="a-b"), "operator"),
    (dict(operator="x", bugs=0), "bugs"), (dict(operator="x", hint="line"), "hint"),
    (dict(operator="x", distance=3), "distance"),
])
def test_family_rejects_bad_settings(kwargs, word):
    with pytest.raises(UsageError, match=word):
        Family(**kwargs)


def test_from_key_rejects_garbage():
    with pytest.raises(UsageError, match="family key"):
        Family.from_key("compare/1/function/0")


# -- simulated learners --------------------------------------------------------------------------


def run_static(sampler, p_true, draws=5000, batch=10, seed=0):
    rng = random.Random(seed + 1000)  # never the sampler's seed: equal streams would correlate
    counts = collections.Counter()
    for _ in range(draws // batch):
        for fam in sampler.sample(batch):
            counts[fam] += 1
            sampler.update(fam, rng.random() < p_true[fam])
    return {fam: counts[fam] / draws for fam in p_true}


def test_static_learner_draws_concentrate_where_p_times_1_minus_p_is_high():
    # Families at the hardest setting have no harder(); promotion cannot change the set.
    fams = [Family(f"op{i}", 3, "test", 2) for i in range(5)]
    p_true = dict(zip(fams, [0.02, 0.2, 0.5, 0.8, 0.98]))
    frontier = run_static(FrontierSampler(fams, FrontierConfig(seed=0)), p_true)
    uniform = run_static(UniformSampler(fams, seed=0), p_true)
    f = [frontier[fam] for fam in fams]
    u = [uniform[fam] for fam in fams]
    report = f"frontier shares {[round(x, 3) for x in f]}, uniform shares {[round(x, 3) for x in u]}"
    assert f[2] > max(f[1], f[3]) > max(f[0], f[4]), report
    assert min(f[1], f[3]) > max(f[0], f[4]), report
    assert f[2] > 0.3 and max(f[0], f[4]) < 0.13, report  # uniform gives each 0.2
    assert all(abs(x - 0.2) < 0.03 for x in u), report
    assert f[2] - f[0] > 2 * abs(u[2] - u[0]) + 0.15, report


class GRPOLearner:
    """Success on family f is sigmoid(k (x_f - theta_f)), theta_f rising with f's level.

    x_f is f's training so far, counted by learning signal: an episode adds 4p(1-p) (1 at p=1/2,
    0 when the group's rewards are all equal, as in GRPO), and transfers ``transfer`` times that
    to the harder families of its chain. A raw episode count would let hopeless episodes teach,
    which is exactly what the frontier assumes they do not.
    """

    def __init__(self, k=0.15, base=10.0, step=20.0, transfer=0.5, seed=0):
        self.k, self.base, self.step, self.transfer = k, base, step, transfer
        self.x: collections.Counter = collections.Counter()
        self.rng = random.Random(seed + 1000)

    def p(self, fam):
        return 1.0 / (1.0 + math.exp(-self.k * (self.x[fam] - (self.base + self.step * fam.level))))

    def episode(self, fam):
        p = self.p(fam)
        success = self.rng.random() < p
        gain = 4 * p * (1 - p)
        self.x[fam] += gain
        for harder in fam.chain()[1:]:
            self.x[harder] += self.transfer * gain
        return success


def run_improving(sampler, learner, draws=3000, batch=10):
    levels, learnable = [], 0
    for _ in range(draws // batch):
        for fam in sampler.sample(batch):
            learnable += 0.1 < learner.p(fam) < 0.9
            levels.append(fam.level)
            sampler.update(fam, learner.episode(fam))
    window = len(levels) // 5
    chunks = [levels[i * window:(i + 1) * window] for i in range(5)]
    return {
        "mean_level": [round(sum(c) / len(c), 2) for c in chunks],
        "mode_level": [collections.Counter(c).most_common(1)[0][0] for c in chunks],
        "learnable": learnable / len(levels),
        "mastered": sum(learner.p(fam) > 0.9 for fam in UNIVERSE),
    }


def test_improving_learner_frontier_moves_to_harder_families_uniform_does_not():
    frontier_sampler = FrontierSampler([Family(op) for op in OPS], FrontierConfig(seed=0))
    frontier = run_improving(frontier_sampler, GRPOLearner())
    uniform = run_improving(UniformSampler(UNIVERSE, seed=0), GRPOLearner())
    report = f"frontier {frontier}, uniform {uniform}"
    # The draw mass follows the frontier: mean level rises window by window, the mode moves
    # from the easiest families to the hard end.
    assert all(a < b for a, b in zip(frontier["mean_level"], frontier["mean_level"][1:])), report
    assert frontier["mode_level"][0] == 0 and frontier["mode_level"][-1] >= 4, report
    # Promotion brought in harder families, up to the hardest settings.
    levels = collections.Counter(fam.level for fam in frontier_sampler.families)
    assert len(frontier_sampler.families) > len(OPS) and max(levels) >= 5, report
    # The control: uniform's mean level stays flat at the universe's mean (3).
    assert all(abs(m - 3.0) < 0.4 for m in uniform["mean_level"]), report
    # Training where the learner sometimes succeeds pays: more learnable draws, more mastered.
    assert frontier["learnable"] > 1.5 * uniform["learnable"], report
    assert frontier["mastered"] > uniform["mastered"] + 3, report


class CountLearner(GRPOLearner):
    """p = sigmoid(k (n_trained - theta_f)) with n_trained the raw episode count on f: every
    episode teaches, even one the learner had no chance on."""

    def episode(self, fam):
        success = self.rng.random() < self.p(fam)
        self.x[fam] += 1
        return success


def test_count_learner_frontier_still_follows_the_frontier():
    sampler = FrontierSampler([Family(op) for op in OPS], FrontierConfig(seed=0))
    frontier = run_improving(sampler, CountLearner(k=0.25, base=10, step=15))
    uniform = run_improving(UniformSampler(UNIVERSE, seed=0), CountLearner(k=0.25, base=10, step=15))
    report = f"frontier {frontier}, uniform {uniform}"
    assert frontier["mean_level"][-1] > frontier["mean_level"][0] + 1.0, report
    assert frontier["mode_level"][0] == 0 and frontier["mode_level"][-1] >= 3, report
    assert max(fam.level for fam in sampler.families) >= 4, report
    assert all(abs(m - 3.0) < 0.4 for m in uniform["mean_level"]), report
    # Here hopeless episodes teach too, so uniform, which spreads them everywhere, masters no
    # fewer families: the frontier's advantage rests on zero-signal episodes being wasted.
    assert uniform["mastered"] >= frontier["mastered"], report


# -- mechanics -------------------------------------------------------------------------------------


def test_probabilities_are_p_times_1_minus_p_plus_floor():
    a, b = Family("a"), Family("b")
    s = FrontierSampler([a, b], FrontierConfig(floor=0.2, promote_at=1.0))
    for _ in range(6):
        s.update(a, True)
    pa, pb = s.estimate(a), s.estimate(b)
    assert pb == 0.5 and pa > 0.8
    wa, wb = pa * (1 - pa), pb * (1 - pb)
    probs = s.probabilities()
    assert probs[a] == pytest.approx(0.1 + 0.8 * wa / (wa + wb))
    assert probs[b] == pytest.approx(0.1 + 0.8 * wb / (wa + wb))
    assert sum(probs.values()) == pytest.approx(1.0)


def test_update_decays_only_that_family_by_default():
    a, b = Family("a"), Family("b")
    s = FrontierSampler([a, b], FrontierConfig(decay=0.5, promote_at=1.0))
    s.update(a, True)
    s.update(b, False)
    s.update(a, False)  # a: 1*0.5 success + 1 failure; b untouched by a's updates
    assert s.posterior(a) == (1.5, 2.0)
    assert s.posterior(b) == (1.0, 2.0)
    assert s.evidence(a) == 1.5 and s.evidence(b) == 1.0


def test_decay_scope_all_decays_every_family_per_update_lazily():
    a, b = Family("a"), Family("b")
    s = FrontierSampler([a, b], FrontierConfig(decay=0.5, decay_scope="all", promote_at=1.0, min_evidence=1))
    s.update(b, False)
    for _ in range(3):
        s.update(a, True)
    assert s.evidence(b) == pytest.approx(0.125)  # three later updates, each halving it
    assert s.posterior(a)[0] == pytest.approx(1 + 1 + 0.5 + 0.25)


def test_promotion_needs_evidence_and_happens_once():
    fam = Family("compare")
    s = FrontierSampler([fam], FrontierConfig(promote_at=0.75, min_evidence=5))
    added = [s.update(fam, True) for _ in range(3)]
    assert s.estimate(fam) > 0.75 and added == [None] * 3  # high p, too little evidence
    added = [s.update(fam, True) for _ in range(5)]
    assert [x for x in added if x] == [fam.harder()]
    assert s.families == [fam, fam.harder()]
    assert s.estimate(fam.harder()) == 0.5  # starts at the prior: the most learnable
    assert all(s.update(fam, True) is None for _ in range(5))  # once only


def test_promote_at_1_disables_promotion_and_unknown_families_join():
    fam = Family("compare")
    s = FrontierSampler([fam], FrontierConfig(promote_at=1.0))
    for _ in range(50):
        assert s.update(fam, True) is None
    other = Family("arith", 2)
    s.update(other, False)
    assert s.families == [fam, other]


def test_sample_sizes_and_protocol():
    fams = [Family("a"), Family("b")]
    for sampler in (FrontierSampler(fams), UniformSampler(fams)):
        assert isinstance(sampler, Sampler)
        assert sampler.sample(0) == []
        assert len(sampler.sample(7)) == 7 and set(sampler.sample(50)) <= set(fams)
        with pytest.raises(UsageError, match="sample size"):
            sampler.sample(-1)
    with pytest.raises(UsageError, match="at least one family"):
        FrontierSampler([])


# -- resuming --------------------------------------------------------------------------------------


def drive(sampler, learner_rng, steps, batch=8):
    drawn = []
    for _ in range(steps):
        batch_fams = sampler.sample(batch)
        drawn.append([f.key for f in batch_fams])
        for fam in batch_fams:
            sampler.update(fam, learner_rng.random() < 0.3 + 0.1 * fam.level)
    return drawn


@pytest.mark.parametrize("make", [
    lambda: FrontierSampler([Family(op) for op in OPS], FrontierConfig(seed=3, decay_scope="all", decay=0.99)),
    lambda: FrontierSampler([Family(op) for op in OPS], FrontierConfig(seed=3)),
    lambda: UniformSampler(UNIVERSE, seed=3),
], ids=["frontier-all", "frontier-family", "uniform"])
def test_save_and_load_mid_run_resume_the_identical_draws(tmp_path, make):
    sampler, rng = make(), random.Random(7)
    drive(sampler, rng, 40)
    path = tmp_path / "sampler.json"
    sampler.save(path)
    rng_at_save = rng.getstate()
    expected = drive(sampler, rng, 40)
    final_state = sampler.state_dict()

    rng.setstate(rng_at_save)
    resumed = load_sampler(path)
    assert type(resumed) is type(sampler)
    assert drive(resumed, rng, 40) == expected
    assert resumed.state_dict() == final_state
    json.dumps(final_state)  # plain JSON all the way down

    # load_state_dict into a fresh sampler does the same.
    rng.setstate(rng_at_save)
    fresh = make()
    fresh.load_state_dict(json.loads(path.read_text()))
    assert drive(fresh, rng, 40) == expected


def test_frontier_run_promotes_then_resumes_with_its_promoted_families(tmp_path):
    s = FrontierSampler([Family("compare")], FrontierConfig(seed=1))
    for _ in range(30):
        s.update(Family("compare"), True)
    s.save(tmp_path / "s.json")
    assert FrontierSampler.load(tmp_path / "s.json").families == s.families == Family("compare").chain()[:2]


def test_load_rejects_other_states(tmp_path):
    path = tmp_path / "u.json"
    UniformSampler([Family("a")]).save(path)
    with pytest.raises(UsageError, match="not a frontier sampler state"):
        FrontierSampler.load(path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="cannot read sampler state"):
        load_sampler(tmp_path / "bad.json")


# -- config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, names", [
    (dict(decay=0.0), ["decay"]),
    (dict(decay=1.5), ["decay"]),
    (dict(decay_scope="global"), ["decay_scope"]),
    (dict(prior=(0.0, 1.0)), ["prior"]),
    (dict(prior=(1.0,)), ["prior"]),
    (dict(floor=1.0), ["floor"]),
    (dict(floor=-0.1), ["floor"]),
    (dict(promote_at=0.0), ["promote_at"]),
    (dict(min_evidence=-1), ["min_evidence"]),
    (dict(max_bugs=0), ["max_bugs"]),
    (dict(promote_at=0.4), ["promote_at", "prior"]),  # below the prior mean 0.5
    (dict(decay=0.9, min_evidence=12), ["min_evidence", "decay"]),  # evidence saturates at 10
    (dict(decay=0.8, min_evidence=2, promote_at=0.9), ["promote_at", "decay", "prior"]),  # p < 6/7
])
def test_config_errors_name_the_fields(kwargs, names):
    with raises_naming(UsageError, names):
        FrontierConfig(**kwargs)


def test_config_defaults_are_documented_and_consistent():
    from dataclasses import fields

    cfg = FrontierConfig()
    assert all(f.metadata.get("help") for f in fields(cfg))
    assert cfg.memory == pytest.approx(20.0)
    assert FrontierConfig(decay=1.0, min_evidence=1000).memory == math.inf  # no forgetting, no bound
    assert FrontierConfig.from_dict({"prior": [2, 2]}).prior == (2, 2)
    with pytest.raises(UsageError, match="unknown FrontierConfig field.*decay_rate"):
        FrontierConfig.from_dict({"decay_rate": 0.9})
