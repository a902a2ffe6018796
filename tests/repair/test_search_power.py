"""Search power on real pytest runs: duplicate edits validated once, the fastest failing test
as the gate, pairs built from what the singles showed, ranked verified alternatives, and the
operator prior learned from a corpus."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from frognano.config import Settings
from frognano.operators import Mutation, mutations
from frognano.repair import prior as prior_mod
from frognano.repair.dedupe import SemanticKeys
from frognano.repair.engine import Engine
from frognano.repair.localize import Location
from frognano.repair.search import Search
from frognano.sandbox.workspace import Workspace

from .test_search import DISCOUNT, TWO_BUGS, fix


SLOW_AND_FAST = {  # two failing tests: one fast, one slow; `-` -> `+` fixes both
    "calc.py": """
        import time

        def add(a, b):
            return a - b

        def slow_add(a, b):
            time.sleep(0.4)
            return add(a, b)
    """,
    "tests/test_calc.py": """
        from calc import add, slow_add

        def test_add():
            assert add(2, 3) == 5

        def test_slow_add():
            assert slow_add(1, 1) == 2

        def test_zero():
            assert add(0, 0) == 0
    """,
}


def test_semantic_keys_ignore_spacing_and_mirrored_comparisons():
    keys = SemanticKeys()
    before = "def f(x, a, b):\n    if a < b:\n        return x + 1\n    return x\n"
    spaced = before.replace("x + 1", "x+1")
    mirrored = before.replace("a < b", "b > a")
    other = before.replace("x + 1", "x + 2")
    base = keys.key("m.py", before, before.replace("x + 1", "x + (1)"))
    assert keys.key("m.py", before, spaced) == base
    assert keys.key("m.py", before, mirrored) == keys.key("m.py", before, before.replace("a < b", "a<b"))
    assert keys.key("m.py", before, mirrored) != keys.key("m.py", before, before.replace("a < b", "a <= b"))
    assert keys.key("m.py", before, other) != base
    # A method (indented) is keyed on its own too, and so is module-level code.
    method = "class C:\n    def f(self, x):\n        return x + 1\n"
    assert keys.key("c.py", method, method.replace("x + 1", "x+1")) == keys.key("c.py", method, method.replace("x + 1", "(x + 1)"))
    module = "LIMIT = 3 + 1\n"
    assert keys.key("k.py", module, "LIMIT = 3+1\n") == keys.key("k.py", module, "LIMIT = (3 + 1)\n")
    assert keys.key("k.py", module, "LIMIT = 3+2\n") != keys.key("k.py", module, "LIMIT = (3 + 1)\n")


def test_duplicate_candidates_are_skipped_and_counted(make_project):
    root = make_project(DISCOUNT)
    with Workspace(root) as ws, Engine(ws, Settings(lanes=1)) as engine:
        diagnosis = engine.diagnose()
        search = Search(ws, engine.verifier(diagnosis))
        source = ws.read("shop/price.py")
        start = source.index("total > 100")
        # Two mutations with different text and the same meaning: `>=` written two ways.
        a = Mutation("compare", "shop/price.py", start, "total > 100", "total >= 100", 2, 2, "discount", "a")
        b = Mutation("compare", "shop/price.py", start, "total > 100", "100 <= total", 2, 2, "discount", "b")
        seen: set = set()
        assert search._candidate((a,), 0, seen) is not None
        assert search._candidate((b,), 0, seen) is None
        assert search.duplicates == 1
        result = search.run(diagnosis.locations)
        assert result.fix is not None and result.duplicates == search.duplicates >= 1
        report = engine.fix()
    assert report.to_json()["search"]["duplicates"] == report.search.duplicates


def test_the_fastest_failing_test_gates_the_slow_ones(make_project):
    root = make_project(SLOW_AND_FAST)
    with Workspace(root) as ws, Engine(ws, Settings(lanes=1)) as engine:
        diagnosis = engine.diagnose()
        verifier = engine.verifier(diagnosis)
        assert verifier.gate == "tests/test_calc.py::test_add"  # the fast one of the two failing
        source = ws.read("calc.py")
        by_text = {m.new: m for m in mutations(source, "calc.py", lines={4}, operators={"arith", "return_value"})}
        search = Search(ws, verifier)

        wrong = search._candidate((by_text["None"],), 0, set())
        runs = verifier.runs
        result = verifier.check(wrong.patch)
        # Only the gate ran: the slow failing test was not paid for.
        assert verifier.runs == runs + 1
        assert result.unseen == ["tests/test_calc.py::test_slow_add"] and not result.fixed

        right = search._candidate((by_text["+"],), 0, set())
        runs = verifier.runs
        result = verifier.check(right.patch)
        assert result.verified and sorted(result.fixed) == ["tests/test_calc.py::test_add",
                                                            "tests/test_calc.py::test_slow_add"]
        assert verifier.runs == runs + 3  # the gate, the other failing test, the covering tests


def test_fast_failing_tests_run_together(make_project):
    """No gate when the other failing tests cost less than a run: one run tells which edit
    fixes which test, which partial fixes and pairs use."""
    root = make_project(TWO_BUGS)
    with Workspace(root) as ws, Engine(ws, Settings(lanes=1)) as engine:
        assert engine.verifier(engine.diagnose()).gate is None


def test_pairs_reuse_what_the_single_edits_showed(make_project):
    root = make_project(TWO_BUGS)
    with Workspace(root) as ws, Engine(ws, Settings(lanes=1)) as engine:
        report = engine.fix()
        assert report.status == "fixed" and report.search.pairs_tried >= 1
        assert report.search.pairs_pruned >= 1
        history = report.search.history
        search = Search(ws, engine.verifier(report.diagnosis))
        pairs = list(search._pair_order(report.search.candidates, history))
    outcome = {id(t.candidate): t.result for t in history}
    idle = {id(t.candidate) for t in history
            if not (t.result.fixed or t.result.changed or t.result.unseen) or t.result.worse}
    assert idle and search.pruned == report.search.pairs_pruned
    assert not any(id(a) in idle or id(b) in idle for a, b in pairs)
    # Partial fixes come first, each completed by edits that moved a failing test first.
    first = pairs[0][0]
    assert outcome[id(first)].fixed
    partners = [b for a, b in pairs if a is first]
    moved = [bool(id(b) in outcome and (outcome[id(b)].fixed or outcome[id(b)].changed)) for b in partners]
    assert moved == sorted(moved, reverse=True)


def test_verified_alternatives_are_ranked_and_in_json(make_project):
    report = fix(make_project(DISCOUNT), lanes=1)
    assert report.status == "fixed"
    alts = report.alternatives
    assert 1 <= len(alts) <= 3
    # Which of the two one-token fixes comes first is the prior's call (learned from data).
    found = [str(n) for f in (report.fix, *alts) for n in f.notes]
    assert {"shop/price.py:2 `>` -> `>=`", "shop/price.py:2 `100` -> `99`"} <= set(found)
    assert all(a.verified.scope == "suite" and len(a.verified.fail_to_pass) == 1 for a in alts)
    out = report.to_json()
    assert [a["diff"] for a in out["alternatives"]] == [a.patch.diff() for a in alts]
    assert all(set(a) == set(out["fix"]) for a in out["alternatives"])


def test_alternatives_rank_smaller_then_likelier_edits_first(make_project):
    root = make_project(DISCOUNT)
    with Workspace(root) as ws, Engine(ws, Settings(lanes=1)) as engine:
        diagnosis = engine.diagnose()
        # A prior that favours constants off by one over comparisons reverses the two fixes.
        search = Search(ws, engine.verifier(diagnosis), prior={"compare": 0.1, "off_by_one": 0.5})
        result = search.run(diagnosis.locations)
    assert [str(n) for n in result.fix.notes] == ["shop/price.py:2 `100` -> `99`"]
    ranked = [result.fix, *result.alternatives]
    assert [f.patch.changed_lines for f in ranked] == sorted(f.patch.changed_lines for f in ranked)
    assert "shop/price.py:2 `>` -> `>=`" in [str(n) for f in ranked for n in f.notes]


@pytest.mark.slow
def test_cli_json_and_text_carry_the_alternatives(make_project):
    root = make_project(DISCOUNT)
    done = subprocess.run([sys.executable, "-m", "frognano", "fix", str(root), "--json"],
                          capture_output=True, text=True, timeout=300)
    out = json.loads(done.stdout)
    assert out["status"] == "fixed" and out["alternatives"]
    assert out["alternatives"][0]["verified"]["fail_to_pass"] == ["tests/test_price.py::test_discount_from_100"]
    text = subprocess.run([sys.executable, "-m", "frognano", "fix", str(root)],
                          capture_output=True, text=True, timeout=300).stdout
    assert "Also verified" in text and "`100` -> `99`" in text


def _case(root, name, buggy, correct, line, cls="wrong-operator"):
    case = root / name
    (case / "project").mkdir(parents=True)
    (case / "correct").mkdir()
    (case / "case.toml").write_text(f'class = "{cls}"\nsummary = "x"\nfile = "m.py"\nline = {line}\n')
    (case / "project" / "m.py").write_text(textwrap.dedent(buggy))
    (case / "correct" / "m.py").write_text(textwrap.dedent(correct))


def test_prior_is_rebuilt_from_a_corpus_and_orders_the_search(tmp_path, make_project, monkeypatch):
    corpus = tmp_path / "realbugs"
    _case(corpus, "01-cmp", "def f(a):\n    return a > 1\n", "def f(a):\n    return a >= 1\n", 2)
    _case(corpus, "02-const", "def g():\n    return 3\n", "def g():\n    return 4\n", 2, "off-by-one")
    _case(corpus, "03-const", "def h(x):\n    return x * 10\n", "def h(x):\n    return x * 9\n", 2,
          "off-by-one")
    _case(corpus, "04-none", "def k():\n    return 'a'\n", "def k():\n    return 'zzz'\n", 2, "wrong-literal")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"operators": ["remove_return"]}) + "\n")
    out = tmp_path / "prior.json"
    subprocess.run([sys.executable, "-m", "frognano.repair.prior", "--corpus", str(corpus), "--tasks", str(tasks),
                    "-o", str(out)], check=True, capture_output=True, timeout=120)
    data = json.loads(out.read_text())
    assert data["corpus"] == {"01-cmp": "compare", "02-const": "off_by_one", "03-const": "off_by_one"}
    repair = prior_mod.CATALOGUE["remove_return"].inverse  # a removed return is repaired by its inverse
    assert data["synth"] == {repair: 1}

    weights = prior_mod.load_prior(out, exclude=[]).weights()
    n = len(set(prior_mod.search_operators()) | {repair})
    assert abs(weights["off_by_one"] - 3 / (4 + n)) < 1e-9 and abs(weights["compare"] - 2 / (4 + n)) < 1e-9
    assert weights["arith"] == 1 / (4 + n)  # never seen, still searched
    assert abs(sum(weights.values()) - 1) < 1e-9
    # Leave-one-out: the benchmark's own case does not count.
    loo = prior_mod.load_prior(out, exclude=["02-const"]).weights()
    assert loo["off_by_one"] == loo["compare"]
    monkeypatch.setenv(prior_mod.EXCLUDE_ENV, "02-const,03-const")
    assert prior_mod.load_prior(out).weights()["off_by_one"] < prior_mod.load_prior(out).weights()["compare"]

    # The search orders the edits of one location by score x prior.
    root = make_project(DISCOUNT)
    with Workspace(root) as ws, Engine(ws, Settings(lanes=1)) as engine:
        verifier = engine.verifier(engine.diagnose())
        loc = Location("shop/price.py", 2, 2, 1.0, function="discount")
        for favoured in ("off_by_one", "compare"):
            weights = prior_mod.load_prior(out, exclude=["01-cmp"] if favoured == "off_by_one" else
                                           ["02-const", "03-const"]).weights()
            ops = [c.mutations[0].operator for c in Search(ws, verifier, prior=weights).singles([loc])]
            assert ops[0] == favoured, ops


def test_shipped_prior_is_generated_not_hand_set(tmp_path, monkeypatch):
    """Rerunning the command the file names, on the data it names, gives the file back."""
    data = json.loads(prior_mod.DATA.read_text())
    assert data["generated_by"].startswith(prior_mod.COMMAND)
    assert all(op in prior_mod.CATALOGUE for op in [*data["corpus"].values(), *data["synth"]])
    monkeypatch.chdir(prior_mod.DATA.parents[2])  # the repository: the command's paths are relative to it
    args = data["generated_by"].split()[3:]  # after `python -m frognano.repair.prior`
    assert prior_mod.main([*args, "-o", str(tmp_path / "prior.json")]) == 0
    assert json.loads((tmp_path / "prior.json").read_text()) == data


def test_without_an_alternatives_budget_the_first_verified_fix_stands(make_project, monkeypatch):
    from frognano.repair import search as search_module

    monkeypatch.setattr(search_module, "ALT_CANDIDATES", 0)
    report = fix(make_project(DISCOUNT), lanes=1)
    assert report.status == "fixed" and report.alternatives == []
    assert report.to_json()["alternatives"] == []


def test_a_wrong_label_is_fixed_from_the_string_the_failing_test_quoted(make_project):
    """The file never spells the right value; the failing assertion does (`'closed' == 'done'`)."""
    report = fix(make_project({
        "tickets.py": """
            def status(ticket):
                if ticket.get("resolved"):
                    return "closed"
                return "open"
        """,
        "tests/test_tickets.py": """
            from tickets import status

            def test_resolved_tickets_are_done():
                assert status({"resolved": True}) == "done"

            def test_new_tickets_are_open():
                assert status({}) == "open"
        """,
    }))
    assert report.status == "fixed", report.message
    assert any("`\"closed\"` -> `\"done\"`" in str(n) for n in report.fix.notes), report.fix.notes
