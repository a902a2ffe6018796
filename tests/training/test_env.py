"""The task environment: reset lays a task's bug out in a shadow copy, reward scores a patch."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from frognano.config import Settings
from frognano.repair.patch import FileEdit, Patch
from frognano.runtime.replay import ReplayModel
from frognano.synthesis.validate import content_hash
from frognano.training.env import RepoEnv, RewardConfig, TaskError, find_repo, tree_for
from frognano.training.tasks import parse_row

from ..conftest import raises_naming, snapshot
from .conftest import ADD, MUL, NEG, SHOUT, SOURCE, WORDS, bug, head, task_row


def _env(tree: Path, **kw) -> RepoEnv:
    return RepoEnv(tree, Settings(lanes=1), **kw)


def _fix(old: str, new: str, text: str) -> Patch:
    return Patch((FileEdit("arith/ops.py", text, text.replace(old, new, 1)),))


def test_reset_lays_out_the_bug_in_the_shadow_and_the_second_task_reruns_only_what_it_affects(arith, arith_tasks):
    before = snapshot(arith)
    env = _env(arith)
    try:
        a = env.reset(parse_row(arith_tasks[0]))
        assert a.diagnosis.failing == [ADD]
        assert env.ws.read("arith/ops.py") == SOURCE.replace("return a + b", "return a - b")
        assert a.diagnosis.locations and a.diagnosis.locations[0].function == "add"
        assert env.selection.everything  # the first task: the whole suite, with per-test coverage
        words = task_row("arith.W", arith, head(arith), "git",
                         bug('"!"', '"?"', path="arith/words.py", source=WORDS), [SHOUT], [MUL])
        b = env.reset(parse_row(words))
        assert b.diagnosis.failing == [SHOUT]  # task A's bug is gone: add passes again
        # The map of the first run is reused, not rebuilt: only the tests of the functions the
        # two bugs touch run again (test_mul and test_neg keep their results).
        assert env.selection.nodeids == (ADD, SHOUT)
        assert b.diagnosis.run.tests[MUL].passed and b.diagnosis.run.tests[NEG].passed
        assert env.ws.read("arith/ops.py") == SOURCE
        c = env.reset(parse_row(arith_tasks[1]))
        assert c.diagnosis.failing == [NEG]
        assert env.ws.read("arith/ops.py") == SOURCE.replace("return -a", "return a")
    finally:
        env.close()
    assert snapshot(arith) == before  # the project is never written


def test_reward_is_the_task_tests_on_pristine_test_files(arith, arith_tasks):
    env = _env(arith)
    try:
        state = env.reset(parse_row(arith_tasks[0]))
        buggy = env.ws.read("arith/ops.py")
        right = env.reward(state, _fix("a - b", "a + b", buggy))
        assert (right.value, right.resolved, right.fixed, right.regressions) == (1.0, True, [ADD], [])
        wrong = env.reward(state, _fix("a - b", "a * b", buggy))
        assert (wrong.value, wrong.resolved, wrong.still_failing) == (0.0, False, [ADD])
        both = _fix("a - b", "a + b", buggy)
        broke = Patch((FileEdit("arith/ops.py", buggy, both.edits[0].after.replace("a * b", "a + b")),))
        regressed = env.reward(state, broke)
        assert (regressed.value, regressed.resolved, regressed.regressions) == (0.0, False, [MUL])
        assert env.reward(state, None).value == 0.0
        # The tests are the specification: a patch that weakens them scores 0 and never runs.
        test_text = env.ws.read("tests/test_ops.py")
        cheat = Patch((FileEdit("tests/test_ops.py", test_text, test_text.replace("== 5", "== -1")),))
        hacked = env.reward(state, cheat)
        assert hacked.value == 0.0 and not hacked.resolved and "specification" in hacked.refused
        partial = env.reward(state, broke, config=RewardConfig(partial=True))
        assert partial.value == 0.0  # a regression zeroes partial credit too
        assert env.reward(state, _fix("a - b", "a + b", buggy),
                          config=RewardConfig(format_penalty=0.25), malformed=2).value == 0.5
    finally:
        env.close()


def test_partial_credit_counts_the_fail_to_pass_tests_that_pass(arith):
    both = bug("return a + b", "return a - b")
    source = SOURCE.replace("return a + b", "return a - b")
    two = both + bug("return -a", "return a", source=source)[len("diff --git a/arith/ops.py b/arith/ops.py\n"):]
    row = task_row("arith.2", arith, head(arith), "git", two, [ADD, NEG], [MUL])
    env = _env(arith)
    try:
        state = env.reset(parse_row(row))
        assert sorted(state.diagnosis.failing) == [ADD, NEG]
        buggy = env.ws.read("arith/ops.py")
        half = env.reward(state, _fix("a - b", "a + b", buggy), config=RewardConfig(partial=True))
        assert (half.value, half.resolved) == (0.5, False)
    finally:
        env.close()


def test_the_model_never_sees_git(arith, arith_tasks):
    replies = ['<tool_call>\n{"name": "read", "arguments": {"path": ".git/HEAD"}}\n</tool_call>',
               '<tool_call>\n{"name": "search", "arguments": {"pattern": "clean"}}\n</tool_call>',
               '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>']
    env = _env(arith, model=ReplayModel(replies))
    try:
        state = env.reset(parse_row(arith_tasks[0]))
        from frognano.repair.search import SearchResult

        episode, _ = env.engine.model_episode(state.diagnosis, env.engine.verifier(state.diagnosis),
                                              SearchResult(), 0, record=False)
        assert episode.turns[0].result.startswith("error:")  # .git/HEAD is no file of the project
        assert not (env.ws.shadow / ".git").exists()
        assert "COMMIT_EDITMSG" not in json.dumps([t.result for t in episode.turns])
    finally:
        env.close()


def test_named_task_errors(arith, arith_tasks, tmp_path):
    with raises_naming(TaskError, ["nowhere", "--repos"]):
        find_repo(parse_row({**arith_tasks[0], "repo": "owner/nowhere"}), [])
    with raises_naming(TaskError, ["nowhere", str(tmp_path)]):
        find_repo(parse_row({**arith_tasks[0], "repo": "owner/nowhere"}), [tmp_path])
    assert find_repo(parse_row({**arith_tasks[0], "repo": "someone/arith"}), [tmp_path]) == arith.resolve()
    with raises_naming(TaskError, ["no commit", "deadbeef"]):
        tree_for(parse_row({**arith_tasks[0], "base_commit": "deadbeef" * 5}), arith, tmp_path / "trees")
    env = _env(arith)
    try:
        content = content_hash(arith, [p.relative_to(arith).as_posix() for p in arith.rglob("*.py")])
        good = {**arith_tasks[0], "base_kind": "content", "base_commit": content}
        assert env.reset(parse_row(good)).diagnosis.failing == [ADD]
        with raises_naming(TaskError, ["content hash", "does not match", "1234567"]):
            env.reset(parse_row({**good, "base_commit": "1234567" + content[7:]}))
        with raises_naming(TaskError, ["does not apply", "hunk 1"]):
            env.reset(parse_row({**arith_tasks[0], "patch": bug("return a + b", "return b + a").replace(
                "return a + b", "return a + c")}))
        with raises_naming(TaskError, ["does not reproduce", ADD]):
            env.reset(parse_row({**arith_tasks[0], "patch": bug("return a + b", "return b + a")}))
        with raises_naming(TaskError, ["not in the suite", "test_gone"]):
            env.reset(parse_row({**arith_tasks[0], "PASS_TO_PASS": ["tests/test_ops.py::test_gone"]}))
    finally:
        env.close()


def test_a_git_base_behind_head_is_exported_and_used(arith, arith_tasks, tmp_path):
    (arith / "arith" / "ops.py").write_text(SOURCE + "\n\ndef later():\n    return 1\n")
    git = ["git", "-C", str(arith), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "commit", "-qam", "later"], check=True)
    task = parse_row(arith_tasks[0])  # based on the first commit
    tree = tree_for(task, arith, tmp_path / "trees")
    assert tree != arith and (tree / "arith" / "ops.py").read_text() == SOURCE
    assert not (tree / ".git").exists()
    assert tree_for(task, arith, tmp_path / "trees") == tree  # exported once
    env = _env(tree)
    try:
        state = env.reset(task)
        assert env.reward(state, _fix("a - b", "a + b", env.ws.read("arith/ops.py"))).resolved
    finally:
        env.close()


def test_a_dirty_checkout_at_the_base_is_not_used_as_the_clean_tree(arith, arith_tasks, tmp_path):
    (arith / "arith" / "ops.py").write_text(SOURCE.replace("return a * b", "return 0"))
    tree = tree_for(parse_row(arith_tasks[0]), arith, tmp_path / "trees")
    assert tree != arith and (tree / "arith" / "ops.py").read_text() == SOURCE


def test_evaluation_starts_from_the_run_synthesis_stored_for_the_clean_tree(arith, tmp_path):
    from frognano.synthesis.store import read_tasks
    from frognano.synthesis.synth import synthesize

    out = tmp_path / "tasks.jsonl"
    synthesize([arith], out, n=2, seed=3)
    tasks = [parse_row(t.to_dict()) for t in read_tasks(out)]
    assert len(tasks) == 2
    env = _env(arith)
    try:
        state = env.reset(tasks[0])
        assert env.adopted  # synth's baseline of this very tree, with per-test line coverage
        assert not env.selection.everything  # so even the first task re-runs only what its bug affects
        assert state.diagnosis.failing == list(tasks[0].FAIL_TO_PASS)
    finally:
        env.close()
    # Another source state (a new module) has no stored run: the whole suite runs.
    (arith / "arith" / "extra.py").write_text("X = 1\n")
    other = _env(arith)
    try:
        other.reset(tasks[0])
        assert not other.adopted and other.selection.everything
    finally:
        other.close()


def test_a_patch_already_scored_on_the_laid_out_task_is_not_run_again(arith, arith_tasks):
    """A group's episodes often submit the same patch (or none): one run each, the same reward."""
    env = _env(arith)
    try:
        state = env.reset(parse_row(arith_tasks[0]))
        buggy = env.ws.read("arith/ops.py")
        runs = []
        real = env.engine.runner.run
        env.engine.runner.run = lambda *a, **k: runs.append(k.get("fresh", False)) or real(*a, **k)
        first = [env.reward(state, _fix("a - b", "a + b", buggy)), env.reward(state, None)]
        again = [env.reward(state, _fix("a - b", "a + b", buggy)), env.reward(state, None),
                 env.reward(state, _fix("a - b", "a + b", buggy), config=RewardConfig(format_penalty=0.25), malformed=1)]
        # The fix: one warm run and, as it wins, one fresh confirmation; no patch: one run.
        assert runs == [False, True, False]
        assert [(r.value, r.resolved) for r in again] == [(1.0, True), (0.0, False), (0.75, True)]
        assert [(r.value, r.resolved) for r in first] == [(1.0, True), (0.0, False)]
        # A new layout of the task starts with no runs, except that a win confirmed in a fresh
        # interpreter stays confirmed: the same fix of the same task runs nothing again.
        state = env.reset(parse_row(arith_tasks[0]))
        laid_out = len(runs)
        env.reward(state, None)
        assert len(runs) == laid_out + 1
        assert env.reward(state, _fix("a - b", "a + b", buggy)).resolved and len(runs) == laid_out + 1
    finally:
        env.close()


def test_a_reward_cannot_be_won_by_reaching_into_pytest_or_by_a_module_level_change(arith, arith_tasks):
    """The reward RL trains on is as sound as an offered fix: an edit that forges pytest's
    reports is refused before it runs, and a fix that also breaks the module's import (the
    warm session's body swap alone would miss the new module-level statement) scores 0."""
    forge = ("\nimport sys as _s\n_r = _s.modules['_' + 'pytest.reports']\n"
             "_r.TestReport.__init__ = lambda self, *a, **k: None\n")
    env = _env(arith)
    try:
        state = env.reset(parse_row(arith_tasks[0]))
        buggy = env.ws.read("arith/ops.py")
        forged = env.reward(state, Patch((FileEdit("arith/ops.py", buggy, buggy + forge),)))
        assert (forged.value, forged.resolved) == (0.0, False)
        assert "test runner" in forged.refused
        fixed = buggy.replace("a - b", "a + b", 1)
        broken = env.reward(state, Patch((FileEdit(
            "arith/ops.py", buggy, fixed.replace("\n\ndef mul", "\n\nraise RuntimeError('x')\n\n\ndef mul")),)))
        assert (broken.value, broken.resolved) == (0.0, False), broken
        assert env.reward(state, _fix("a - b", "a + b", buggy)).resolved  # the plain fix still wins
    finally:
        env.close()
