"""Model episodes end to end with replayed (scripted) models: fixes, garbage, confinement."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from frognano.errors import FrogNanoError

from frognano.config import Settings
from frognano.repair.agent import EpisodeConfig
from frognano.repair.engine import Engine
from frognano.repair.harness import TOOL_NAMES, ToolCall, parse_tool_call, render_tool_call
from frognano.runtime.replay import ReplayModel
from frognano.sandbox.workspace import Workspace

from ..conftest import snapshot, write_project

NO_SEARCH = {"max_candidates": 0, "max_pairs": 0}


def call(name: str, **arguments) -> str:
    return render_tool_call(ToolCall(name, arguments))


def fix_with(project, replies, **settings):
    settings = {**NO_SEARCH, "episodes": 1, **settings}
    with Workspace(project) as ws, Engine(ws, Settings(**settings), model=ReplayModel(replies)) as engine:
        return engine.fix()


SCRIPTS = {
    "calc": ("calc/stats.py", "return age > 18", "return age >= 18"),
    "inventory": ("inventory/ledger.py", "range(first_day, last_day)", "range(first_day, last_day + 1)"),
    "shapes": ("src/shapes/geometry.py", "self.width * self.width", "self.width * self.height"),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_scripted_model_fixes_each_example(example, name):
    project = example(name)
    before = snapshot(project)
    path, old, new = SCRIPTS[name]
    report = fix_with(project, [
        call("read", path=path),
        call("search", pattern=old.split("(")[0].split(" ")[0]),
        call("edit", path=path, old=old, new=new),
        call("run_tests"),
        call("submit"),
    ])
    assert report.status == "fixed", report.message
    assert report.fix.source == "model"
    assert report.exit_code == 0
    (episode,) = report.episodes
    assert episode.status == "submitted" and episode.malformed == 0 and len(episode.turns) == 5
    assert "passed, 0 failed" in episode.turns[3].result
    assert snapshot(project) == before, "episodes work in the shadow only"
    record = json.loads(episode.record.read_text())
    assert record["status"] == "submitted"
    assert [m["role"] for m in record["messages"][:3]] == ["system", "user", "assistant"]
    assert "failing test" in record["messages"][1]["content"]
    assert all("prompt_tokens" in t and "completion_tokens" in t for t in record["turns"])
    assert record["patch"].startswith("--- a/")


def test_tool_results_say_what_to_do_next(tmp_path):
    """A small model repeats its last call (SmolLM2-135M ran the failing tests again and again,
    applied one candidate four times): the results say the next step where it reads last."""
    # A deleted statement: the search lists candidates but none fixes it, so the episode runs.
    project = write_project(tmp_path / "collect", {
        "collect.py": "def evens(xs):\n    out = []\n    for x in xs:\n        if x % 2 == 0:\n            pass\n"
                      "    return out\n",
        "test_collect.py": "from collect import evens\n\n\ndef test_evens():\n    assert evens([1, 2, 4]) == [2, 4]\n",
    })
    path, old, new = "collect.py", "            pass\n", "            out.append(x)\n"
    report = fix_with(project, [call("run_tests"), call("candidates"), call("edit", path=path, old=old, new=new),
                                call("run_tests"), call("submit")], max_candidates=15)
    assert report.status == "fixed" and report.fix.source == "model"
    (episode,) = report.episodes
    results = [t.result for t in episode.turns]
    # Nothing changed yet and the run fails as the episode began: candidates or edit, not again.
    assert results[0].endswith("Nothing is changed yet: candidates lists likely fixes (apply N), or edit the "
                               "suspicious line.")
    assert results[2].startswith("--- a/collect.py") and results[2].endswith(
        "Changed. Next: run_tests, or submit if you are sure.")
    assert results[3].endswith("The tests pass with your change: submit it.") and "passed, 0 failed" in results[3]
    assert episode.status == "submitted"


# Code the catalogue cannot write: a call with an argument no operator invents (the catalogue
# wraps, swaps and inserts what the file already has; `sorted()` would fix a missing sort).
NEEDS_A_NEW_LINE = {
    "words.py": """
        def normalize(words):
            \"\"\"Lower-cased words without the punctuation around them.\"\"\"
            result = []
            for w in words:
                result.append(w.lower())
            return result
    """,
    "tests/test_words.py": """
        from words import normalize

        def test_punctuation():
            assert normalize(["Hi!", "yo."]) == ["hi", "yo"]

        def test_empty():
            assert normalize([]) == []
    """,
}


def test_model_fixes_what_operators_cannot(make_project):
    project = make_project(NEEDS_A_NEW_LINE)
    report = fix_with(project, [
        call("candidates"),
        call("edit", path="words.py", old="result.append(w.lower())", new="result.append(w.lower().strip(\".,!\"))"),
        call("run_tests", selection=["all"]),
        call("submit"),
    ], max_candidates=400, max_pairs=20)
    assert report.search.tried > 0, "the operator search ran first"
    assert report.status == "fixed" and report.fix.source == "model"
    assert '+        result.append(w.lower().strip(".,!"))' in report.fix.patch.diff()
    assert report.fix.verified.pass_to_pass == 1


def test_candidates_and_apply_tools(example):
    project = example("calc")
    # A search budget too small to reach the fix leaves it among the untried candidates.
    with Workspace(project) as ws, Engine(ws, Settings(max_candidates=1, max_pairs=0, episodes=1),
                                          model=ReplayModel([call("candidates"), call("candidates")])) as engine:
        report = engine.fix()
    listing = report.episodes[0].turns[0].result
    assert "1. calc/stats.py:15" in listing
    n = next(int(line.split(".")[0]) for line in listing.splitlines() if "`>` -> `>=`" in line)
    report = fix_with(project, [call("candidates"), call("apply", n=n), call("run_tests"), call("submit")],
                      max_candidates=1)
    assert report.status == "fixed" and report.fix.source == "model"


def test_apply_runs_the_failing_tests_and_takes_back_the_candidate_before(example):
    """``apply`` tries a candidate: its result says whether the failing tests now pass, and the
    next ``apply`` replaces it rather than stacking a second edit on it (candidates are
    alternatives), so reading a failing result and trying another is one call each."""
    project = example("calc")
    with Workspace(project) as ws, Engine(ws, Settings(max_candidates=1, max_pairs=0, episodes=1),
                                          model=ReplayModel([call("candidates"), call("candidates")])) as engine:
        report = engine.fix()
    rows = report.episodes[0].turns[0].result.splitlines()
    right = next(int(r.split(".")[0]) for r in rows if "`>` -> `>=`" in r)
    wrong = next(int(r.split(".")[0]) for r in rows if "`18` -> `19`" in r)  # is_adult(18) stays False
    report = fix_with(project, [call("candidates"), call("apply", n=wrong), call("apply", n=wrong),
                                call("apply", n=right), call("submit")], max_candidates=1)
    assert report.status == "fixed" and report.fix.source == "model"
    (episode,) = report.episodes
    results = [t.result for t in episode.turns]
    assert "the failing tests: " in results[1] and "failed" in results[1]
    assert results[1].endswith("Still failing: apply another candidate (it replaces this one), or edit.")
    assert results[2] == f"error: candidate {wrong} is applied already; apply another, or submit"
    assert f"(candidate {wrong} taken back)" in results[3]
    assert results[3].endswith("The tests pass with your change: submit it.")
    # One edit in the submitted patch: the wrong candidate was taken back, not stacked.
    diff = episode.patch.diff()
    assert sum(line.startswith("+") and not line.startswith("+++") for line in diff.splitlines()) == 1
    assert ">=" in diff


def test_submit_is_offered_only_once_a_file_is_changed(example):
    """Submitting nothing is refused like any tool error (the episode goes on), and the tools
    offered to the model's grammar leave ``submit`` out until an edit exists."""
    offered = []

    class Recording(ReplayModel):
        def generate(self, messages, tools=None, sampling=None, **kwargs):
            offered.append(kwargs.get("offered"))
            return super().generate(messages, tools, sampling, **kwargs)

    path, old, new = SCRIPTS["calc"]
    replies = [call("submit"), call("edit", path=path, old=old, new=new), call("submit")]
    with Workspace(example("calc")) as ws, Engine(ws, Settings(**NO_SEARCH, episodes=1), model=Recording(replies)) as engine:
        report = engine.fix()
    assert report.status == "fixed" and report.fix.source == "model"
    (episode,) = report.episodes
    assert episode.turns[0].result.startswith("error: nothing to submit") and episode.malformed == 0
    assert [("submit" in names) for names in offered] == [False, False, True]
    assert set(offered[0]) == set(TOOL_NAMES) - {"submit", "run_tests"}  # run_tests: see below
    with pytest.raises(FrogNanoError, match="apply or edit"):
        EpisodeConfig(tools=("candidates", "submit"))


def test_calls_that_cannot_say_anything_new_are_not_offered(example):
    """``run_tests`` and ``candidates`` leave the grammar's choice once answered in a state of the
    files (the first observation is the run of the unchanged ones), and come back after an edit."""
    offered = []

    class Recording(ReplayModel):
        def generate(self, messages, tools=None, sampling=None, **kwargs):
            offered.append(set(kwargs.get("offered")))
            return super().generate(messages, tools, sampling, **kwargs)

    path, old, new = SCRIPTS["calc"]
    replies = [call("candidates"), call("edit", path=path, old=old, new=new), call("run_tests"), call("submit")]
    with Workspace(example("calc")) as ws, Engine(ws, Settings(**NO_SEARCH, episodes=1), model=Recording(replies)) as engine:
        report = engine.fix()
    assert report.status == "fixed"
    assert ["run_tests" in names for names in offered] == [False, False, True, False]
    assert ["candidates" in names for names in offered] == [True, False, True, True]
    assert all({"read", "search", "edit"} <= names for names in offered)
    # apply leaves once the failing tests pass in the current state (another candidate would
    # replace the change that passes them).
    assert ["apply" in names for names in offered] == [True, True, True, False]


def test_garbage_model_ends_cleanly_unfixed(example):
    project = example("calc")
    garbage = ["lorem ipsum", "<tool_call>{not json</tool_call>", '<tool_call>{"name": "rm", "arguments": {}}</tool_call>',
               '<tool_call>{"name": "read", "arguments": {"path": 3}}</tool_call>'] * 5
    report = fix_with(project, garbage, max_turns=8)
    assert report.status == "unfixed" and report.exit_code == 1
    (episode,) = report.episodes
    assert episode.status == "turn_budget" and episode.malformed == 8
    replies = [t.result for t in episode.turns]
    assert replies[0].startswith("error: no tool call found")
    assert "not valid JSON" in replies[1] and "unknown tool 'rm'" in replies[2] and "path must be a string" in replies[3]


def test_a_looping_model_is_stopped(example):
    report = fix_with(example("calc"), [call("read", path="calc/stats.py")] * 10)
    assert report.episodes[0].status == "looping" and len(report.episodes[0].turns) == 3


def test_token_budget(example):
    report = fix_with(example("calc"), [call("read", path="calc/stats.py", start=i) for i in range(1, 10)],
                      max_episode_tokens=50)
    assert report.episodes[0].status == "token_budget"


def test_the_model_cannot_read_or_edit_outside_the_project(tmp_path):
    outside = write_project(tmp_path / "outside", {"secret.py": "TOKEN = 'hunter2'\n"})
    project = write_project(tmp_path / "proj", {
        "m.py": "def one():\n    return 2\n",
        "tests/test_m.py": "from m import one\n\ndef test_one():\n    assert one() == 1\n",
    })
    os.symlink(outside / "secret.py", project / "link.py")
    before = snapshot(outside)
    attempts = [
        call("read", path="../outside/secret.py"),
        call("read", path=str(outside / "secret.py")),
        call("read", path="link.py"),
        call("edit", path="../outside/secret.py", old="hunter2", new="pwned"),
        call("edit", path="link.py", old="hunter2", new="pwned"),
        call("search", pattern="hunter2", path="../outside/secret.py"),
        call("run_tests", selection=["../outside/secret.py"]),
        call("edit", path="m.py", old="return 2", new="return (1"),
        call("edit", path="m.py", old="return", new="yield"),
        call("submit"),
    ]
    report = fix_with(project, attempts)
    results = [t.result for t in report.episodes[0].turns]
    assert all(r.startswith("error:") for r in results[:7]), results
    assert not any("hunter2" in r for r in results)
    assert "break the syntax" in results[7]
    assert report.episodes[0].status == "submitted"  # the last edit (return -> yield) was allowed
    assert report.status == "unfixed"
    assert snapshot(outside) == before


def test_cli_with_a_replayed_episode(example, tmp_path):
    project = example("calc")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        call("edit", path="calc/stats.py", old="age > 18", new="age >= 18"), call("submit"),
    ]))
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.frognano]\nmax_candidates = 0\nmax_pairs = 0\n")
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model", f"replay:{script}",
                           "--episodes", "1", "--json"], capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert out["fix"]["source"] == "model" and out["episodes"][0]["status"] == "submitted"
    record = out["episodes"][0]["record"]
    # The record replays: the same episode again from its own file.
    again = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model", f"replay:{record}",
                            "--episodes", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert json.loads(again.stdout)["fix"]["diff"] == out["fix"]["diff"]

    bad = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model", "nonsense"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "expected mlx:PATH_OR_ID" in bad.stderr


def test_parse_tool_call_accepts_the_qwen_form():
    text = 'thinking...\n<tool_call>\n{"name": "read", "arguments": {"path": "a.py", "start": 3}}\n</tool_call>'
    assert parse_tool_call(text) == ToolCall("read", {"path": "a.py", "start": 3})
    assert parse_tool_call(call("submit")) == ToolCall("submit", {})


def test_dead_endpoint_is_exit_2_with_a_clear_message(example):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    project = example("calc")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.frognano]\nmax_candidates = 0\nmax_pairs = 0\n")
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model",
                           f"openai:tiny@http://127.0.0.1:{port}/v1", "--episodes", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "connection refused" in errors[0]


def test_a_seeded_episode_draws_each_turn_from_its_own_stream():
    from frognano.repair.agent import turn_sampling
    from frognano.runtime.base import Sampling

    base = Sampling(temperature=1.0, seed=7)
    seeds = [turn_sampling(base, t).seed for t in range(4)]
    assert seeds[0] == 7 and len(set(seeds)) == 4
    assert turn_sampling(base, 2) == turn_sampling(base, 2)  # reproducible
    assert turn_sampling(Sampling(temperature=1.0), 3).seed is None  # unseeded stays unseeded


def test_a_shorter_candidate_list_bounds_apply_in_the_schema():
    from frognano.repair.harness import MAX_CANDIDATES, TOOLS

    def n_max(config):
        return next(t for t in config.schemas if t["function"]["name"] == "apply")["function"]["parameters"][
            "properties"]["n"]["maximum"]

    assert n_max(EpisodeConfig()) == MAX_CANDIDATES
    assert n_max(EpisodeConfig(tools=("candidates", "apply", "submit"), listed=3)) == 3
    assert TOOLS[[t["function"]["name"] for t in TOOLS].index("apply")]["function"]["parameters"][
        "properties"]["n"]["maximum"] == MAX_CANDIDATES  # the shared schema is untouched
    with pytest.raises(FrogNanoError, match="listed"):
        EpisodeConfig(listed=0)


def test_a_repeated_call_is_answered_once_then_ends_the_episode(example):
    """The same call with nothing changed since: the first repeat is told so (the tool is not run
    again), the second ends the episode; after an edit the same call is new again."""
    read = call("read", path="calc/stats.py")
    edit = call("edit", path="calc/stats.py", old="return age > 18", new="return age > 17")
    report = fix_with(example("calc"), [read, read, edit, read, read, read, read])
    (episode,) = report.episodes
    assert episode.status == "looping"
    replies = [t.result for t in episode.turns]
    assert replies[1].startswith("note: you made this call before and nothing has changed since")
    assert replies[1].endswith(replies[0])
    assert not replies[3].startswith("note:") and replies[4].startswith("note:")
    assert len(episode.turns) == 6  # read, read (noted), edit, read, read (noted), read: ends


def test_a_reply_cut_at_the_token_limit_costs_one_line(example):
    """A reply that ran out of tokens inside its call is answered in one line, and the
    conversation keeps only its start (later prompts do not pay for the filler)."""

    class Cut(ReplayModel):
        def generate(self, messages, tools=None, sampling=None, **kwargs):
            gen = super().generate(messages, tools, sampling, **kwargs)
            if gen.text.startswith("<tool_call>\n{\"name\": \"run_tests\""):
                gen.finish_reason = "length"
            return gen

    cut = '<tool_call>\n{"name": "run_tests", "arguments": {"selection": [' + ', '.join(['"tests/test_stats.py"'] * 40)
    project = example("calc")
    seen: list[list[dict]] = []

    class Watching(Cut):
        def generate(self, messages, tools=None, sampling=None, **kwargs):
            seen.append([dict(m) for m in messages])
            return super().generate(messages, tools, sampling, **kwargs)

    model = Watching([cut, call("candidates")])
    with Workspace(project) as ws, Engine(ws, Settings(**NO_SEARCH, episodes=1, max_turns=2), model=model) as engine:
        report = engine.fix()
    (episode,) = report.episodes
    first = episode.turns[0]
    assert first.call is None and first.result.startswith("error: the reply was cut off") and "\n" not in first.result
    kept = seen[1][2]["content"]
    assert kept.startswith(cut[:100]) and len(kept) < 300 and "[cut:" in kept
    assert first.reply == cut  # the record keeps the whole reply


def test_the_record_is_written_as_the_episode_goes(example, tmp_path):
    """After every turn the record on disk says what happened so far (status running), so a
    process killed mid-episode leaves it; at the end it holds the outcome."""
    from frognano.repair.agent import run_episode
    from frognano.repair.harness import ToolBox
    from frognano.sandbox.runner import RunnerConfig, TestRunner

    snapshots = []

    class Peeking(ReplayModel):
        def generate(self, messages, tools=None, sampling=None, **kwargs):
            snapshots.append([json.loads(p.read_text())["status"] for p in sorted((tmp_path / "rec").glob("*.json"))])
            return super().generate(messages, tools, sampling, **kwargs)

    project = example("calc")
    with Workspace(project) as ws:
        runner = TestRunner(ws, RunnerConfig.from_settings(Settings()))
        toolbox = ToolBox(ws, runner, ["tests/test_stats.py::test_is_adult[18-True]"])
        episode = run_episode(Peeking([call("candidates"), call("read", path="calc/stats.py")]), toolbox, "obs",
                              EpisodeConfig(max_turns=2), record_dir=tmp_path / "rec")
        runner.close()
    assert snapshots == [[], ["running"]]
    assert json.loads(episode.record.read_text())["status"] == "turn_budget"


@pytest.mark.slow
def test_fix_seconds_bounds_the_model_episodes(example):
    """A model slower than the fix's time limit is cancelled at it (the episode ends
    ``cancelled``, no further episode starts) and the report says fix_seconds ran out; with
    a model the search gets only part of the budget, so the episodes get the rest."""
    import threading
    import time

    waited: list[float] = []

    class Slow(ReplayModel):
        def generate(self, messages, tools=None, sampling=None, *, cancel=None, **kwargs):
            t = time.monotonic()
            assert cancel is not None
            cancel.wait(60)  # a model that never finishes its reply on its own
            waited.append(time.monotonic() - t)
            return super().generate(messages, tools, sampling, cancel=cancel, **kwargs)

    started = time.monotonic()
    with Workspace(example("calc")) as ws, \
            Engine(ws, Settings(**NO_SEARCH, episodes=3, fix_seconds=12), model=Slow([call("candidates")] * 3)) as engine:
        report = engine.fix(cancel=threading.Event())
    took = time.monotonic() - started
    assert report.status == "unfixed"
    assert [e.status for e in report.episodes] == ["cancelled"]
    assert len(waited) == 1 and waited[0] < 12
    assert took < 20, took
    assert any("model episodes stopped after 1 of 3: fix_seconds = 12 ran out" in n for n in report.notes)


def test_the_search_leaves_the_model_its_share_of_fix_seconds(example):
    """``search_budget``: with a model, half of what is left (less a confirmation's time)."""
    import time

    from frognano.repair.engine import SEARCH_SHARE_WITH_MODEL

    with Workspace(example("calc")) as ws, Engine(ws, Settings(fix_seconds=100, search_seconds=300)) as engine:
        diagnosis = engine.diagnose()
        now = time.monotonic()
        alone = engine.search_budget(diagnosis, now)
        shared = engine.search_budget(diagnosis, now, share=SEARCH_SHARE_WITH_MODEL)
    assert 90 < alone <= 100 and abs(shared - alone * SEARCH_SHARE_WITH_MODEL) < 1
