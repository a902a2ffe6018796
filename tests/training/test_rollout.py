"""Rollouts: the token sequence a policy saw and sampled, and the log-probabilities it sampled with."""

from __future__ import annotations

import pytest

from frognano.config import Settings
from frognano.training.env import RepoEnv
from frognano.training.tasks import parse_row


@pytest.fixture
def policy(tiny_torch):
    pytest.importorskip("transformers")
    from frognano.runtime.torch import TorchModel

    return TorchModel.load(str(tiny_torch))


@pytest.mark.parametrize("constrain", [False, True])
def test_the_loss_scores_exactly_the_sequence_and_distribution_that_were_sampled(arith, arith_tasks, policy,
                                                                                 constrain):
    from frognano.training.rollout import rollout
    from frognano.training.torch_grpo import sequence_logprobs

    settings = Settings(lanes=1, temperature=1.0, max_turns=3, max_new_tokens=40, constrain=constrain)
    env = RepoEnv(arith, settings, model=policy)
    try:
        state = env.reset(parse_row(arith_tasks[0]))
        for seed in range(20):  # a random model: the first seed whose episode has two turns or more
            r = rollout(env, state, group=7, seed=seed, tools=("candidates", "apply", "submit"))
            if r.turns >= 2:
                break
    finally:
        env.close()
    s = r.sample
    assert r.status != "error" and not s.error and s.group == 7
    assert r.turns >= 2 and 0 in s.mask and 1 in s.mask  # sampled turns and the tools' replies between them
    assert all(lp == 0.0 for lp, m in zip(s.logprobs, s.mask) if m == 0)
    assert (s.allowed is not None) == constrain
    # Teacher-forced over the recorded sequence (renormalised over the grammar's allowed tokens
    # where it constrained the turn), the policy gives back what it sampled with.
    again = sequence_logprobs(policy.model, [s], temperature=1.0)[0].detach()
    diffs = [abs(float(a) - b) for a, b, m in zip(again, s.logprobs, s.mask) if m]
    assert max(diffs) < 1e-4
    # The first prompt is the serving harness's, with only the offered tools.
    prompt = policy.decode(s.prompt_ids)
    assert '"name": "apply"' in prompt and '"name": "read"' not in prompt and "failing test" in prompt


def test_a_rollout_on_a_model_without_recording_is_refused(arith, arith_tasks):
    from frognano.errors import FrogNanoError
    from frognano.runtime.replay import ReplayModel
    from frognano.training.rollout import rollout

    env = RepoEnv(arith, Settings(lanes=1), model=ReplayModel([]))
    try:
        state = env.reset(parse_row(arith_tasks[0]))
        with pytest.raises(FrogNanoError, match="in-process"):
            rollout(env, state, group=0, seed=0)
    finally:
        env.close()


def test_a_tasks_candidates_are_generated_once_per_picture(arith, arith_tasks, monkeypatch):
    """The candidates tool's list is the same for every draw and every evaluation of a task (same
    buggy texts, same suspicious lines): generated once, then taken from the environment."""
    from frognano.repair.search import Search
    from frognano.training.rollout import candidates_for

    made = []
    real = Search.singles
    monkeypatch.setattr(Search, "singles", lambda self, locs: made.append(1) or real(self, locs))
    env = RepoEnv(arith, Settings(lanes=1))
    try:
        first = candidates_for(env, env.reset(parse_row(arith_tasks[0])))
        again = candidates_for(env, env.reset(parse_row(arith_tasks[1])))
        assert len(made) == 2  # another task: its own list
        state = env.reset(parse_row(arith_tasks[0]))
        third = candidates_for(env, state)
        assert len(made) == 2 and [c.patch.diff() for c in third.candidates] == [c.patch.diff() for c in first.candidates]
        third.candidates.clear()  # a caller's list is its own
        assert candidates_for(env, state).candidates and again.candidates
    finally:
        env.close()
