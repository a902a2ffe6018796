"""The operator search on small projects: single edits, two-location bugs, budgets."""

import threading

import pytest

from frognano.config import Settings
from frognano.repair import search as search_module
from frognano.repair.engine import Engine
from frognano.sandbox.workspace import Workspace

TWO_BUGS = {
    "shop/__init__.py": "",
    "shop/cart.py": """
        def subtotal(prices):
            total = 0
            for p in prices:
                total -= p
            return total


        def shipping(total):
            if total < 50:
                return 0
            return 5
    """,
    "tests/test_cart.py": """
        from shop.cart import shipping, subtotal

        def test_subtotal():
            assert subtotal([10, 20]) == 30

        def test_subtotal_empty():
            assert subtotal([]) == 0

        def test_shipping_free_above_50():
            assert shipping(80) == 0

        def test_shipping_paid_below_50():
            assert shipping(20) == 5

        def test_checkout():
            total = subtotal([30, 40])
            assert total + shipping(total) == 70
    """,
}


def fix(project, **settings):
    with Workspace(project) as ws, Engine(ws, Settings(**settings)) as engine:
        return engine.fix()


def test_two_location_bug_is_fixed_by_a_pair(make_project):
    report = fix(make_project(TWO_BUGS))
    assert report.status == "fixed", report.message
    assert report.search.pairs_tried >= 1
    notes = " ".join(map(str, report.fix.notes))
    assert "`-=` -> `+=`" in notes and ("`<` -> `>`" in notes or "`<` -> `>=`" in notes)
    assert set(report.fix.verified.fail_to_pass) == {
        "tests/test_cart.py::test_subtotal", "tests/test_cart.py::test_shipping_free_above_50",
        "tests/test_cart.py::test_shipping_paid_below_50", "tests/test_cart.py::test_checkout",
    }
    assert report.fix.verified.pass_to_pass == 1
    assert len(report.fix.patch.edits) == 1 and report.fix.patch.changed_lines == 4


def test_without_a_pair_budget_the_best_partial_fixes_are_reported(make_project):
    report = fix(make_project(TWO_BUGS), max_pairs=0)
    assert report.status == "unfixed" and report.exit_code == 1
    assert report.search.best and report.search.best[0].result.fixed
    assert "budget" in report.message or "no candidate" in report.message


def test_cancel_stops_the_search(make_project):
    cancel = threading.Event()
    cancel.set()
    with Workspace(make_project(TWO_BUGS)) as ws, Engine(ws, Settings()) as engine:
        report = engine.fix(cancel=cancel)
    assert report.status == "unfixed" and report.search.stopped == "cancelled"
    assert report.search.tried == 0


def test_candidate_budget_is_respected(make_project):
    report = fix(make_project(TWO_BUGS), max_candidates=3, max_pairs=2)
    assert report.search.tried <= 3 and report.search.pairs_tried <= 2


def test_default_argument_bug_is_found_through_the_function_header(make_project):
    report = fix(make_project({
        "fmt.py": """
            def pad(text, width=4):
                return text.rjust(width)
        """,
        "tests/test_fmt.py": """
            from fmt import pad

            def test_default():
                assert pad("ab") == "   ab"

            def test_explicit():
                assert pad("ab", 3) == " ab"
        """,
    }))
    assert report.status == "fixed", report.message
    note = report.fix.notes[0]
    assert "default" in note.description or "`4` -> `5`" in note.description


DISCOUNT = {  # `>` -> `>=` is the fix; `100` -> `99` also passes these tests (plausible, wrong)
    "shop/__init__.py": "",
    "shop/price.py": """
        def discount(total):
            if total > 100:
                return 10
            return 0
    """,
    "tests/test_price.py": """
        from shop.price import discount

        def test_discount_from_100():
            assert discount(100) == 10

        def test_no_discount_below():
            assert discount(50) == 0
    """,
}


def test_search_fix_notes_are_structured(make_project):
    report = fix(make_project(DISCOUNT))
    assert report.status == "fixed", report.message
    assert report.fix.source == "search" and report.fix.record is None
    (note,) = report.fix.notes
    assert (note.path, note.line, note.description) == ("shop/price.py", 2, "`>` -> `>=`")
    # --json prints the notes as it always has: "path:line description".
    assert report.fix.to_json()["notes"] == ["shop/price.py:2 `>` -> `>=`"]
    assert report.to_json()["search"]["stopped"] is None


@pytest.mark.slow
def test_two_lanes_find_what_one_lane_finds_in_the_same_order(make_project, example, monkeypatch):
    """Candidates validated two at a time, each lane on its own shadow copy, give the search
    the same history, verdicts and fix as one at a time.  The second lane opens only once the
    first few single edits on one lane found no fix (shapes' is among them; the two-location
    bug needs pairs)."""
    # The look for alternatives after a fix is bounded by count and by seconds; by count only
    # here, so a loaded machine does not make the two histories differ.
    monkeypatch.setattr(search_module, "ALT_SECONDS", 1e9)
    for project, opened in ((example("shapes"), 0), (make_project(TWO_BUGS), 1)):
        one = fix(project, lanes=1)
        with Workspace(project) as ws, Engine(ws, Settings(lanes=2)) as engine:
            two = engine.fix()
            assert len(engine._lanes) == opened, "the second lane was (not) used"
        assert two.status == one.status == "fixed", (one.message, two.message)
        assert two.fix.patch.diff() == one.fix.patch.diff()
        assert [a.patch.diff() for a in two.search.alternatives] == [a.patch.diff() for a in one.search.alternatives]
        history = [(t.candidate.describe(), t.result.verified, sorted(t.result.fixed)) for t in one.search.history]
        assert [(t.candidate.describe(), t.result.verified, sorted(t.result.fixed))
                for t in two.search.history] == history
        assert (two.search.tried, two.search.pairs_tried) == (one.search.tried, one.search.pairs_tried)


@pytest.mark.slow
def test_fix_seconds_gives_the_search_what_the_test_runs_left(make_project):
    """The whole fix is bounded: the search's budget is fix_seconds less the diagnosis and the
    time a confirmation takes, never under MIN_SEARCH_SECONDS nor over search_seconds."""
    from frognano.repair.engine import MIN_SEARCH_SECONDS

    report = fix(make_project(TWO_BUGS), fix_seconds=0.001)
    assert report.status == "fixed"  # the floor leaves the search enough for a small project
    assert report.search.budget == MIN_SEARCH_SECONDS
    assert fix(make_project(TWO_BUGS), fix_seconds=0).search.budget == Settings().search_seconds
    with Workspace(make_project(TWO_BUGS)) as ws, Engine(ws, Settings(fix_seconds=100, search_seconds=300)) as engine:
        diagnosis = engine.diagnose()
        diagnosis.run.duration = 20.0
        import time

        budget = engine.search_budget(diagnosis, time.monotonic() - 30)
        # 100 - 30 elapsed - a fresh run of what took 20 s traced: 1 s to start, 20 / 3 to run
        assert 61 <= budget <= 62.4
        diagnosis.run.duration = 200.0  # a confirmation is reserved at most a third of the budget
        assert 36 <= engine.search_budget(diagnosis, time.monotonic() - 30) <= 100 - 30 - 100 / 3


def test_fix_seconds_counts_a_diagnosis_the_caller_ran_first(make_project):
    """The CLI diagnoses before it calls fix() (to show the failures first): given when that
    began, the search gets what is left of fix_seconds, not fix_seconds afresh (more-itertools'
    63 s diagnosis had made a 110 s bound a 140 s fix)."""
    import time

    with Workspace(make_project(TWO_BUGS)) as ws, Engine(ws, Settings(fix_seconds=100, search_seconds=300)) as engine:
        diagnosis = engine.diagnose()
        diagnosis.run.duration = 1.0
        report = engine.fix(diagnosis=diagnosis, started=time.monotonic() - 60)
        assert 37 <= report.search.budget <= 39  # 100 - 60 already spent - 1.3 to confirm
        assert engine.fix(diagnosis=diagnosis).search.budget >= 97  # a reused diagnosis is not counted


def test_a_search_cut_short_by_fix_seconds_says_so(make_project, monkeypatch):
    from frognano.repair import engine as engine_module

    monkeypatch.setattr(engine_module, "MIN_SEARCH_SECONDS", 0.0)
    report = fix(make_project(TWO_BUGS), fix_seconds=0.001)
    assert report.status == "unfixed" and report.search.stopped == "time"
    assert "fix_seconds = 0.001 left after the test runs" in report.message, report.message


HANDLERS = {
    "conf/__init__.py": "",
    "conf/read.py": """
        def setting(table, key, default=None):
            try:
                return table[key]
            except KeyError:
                return default


        def numbers(words):
            out = []
            for w in words:
                out.append(int(w))
            return out
    """,
    "tests/test_read.py": """
        from conf.read import numbers, setting

        def test_setting_without_a_table():
            assert setting(None, "k", "x") == "x"

        def test_setting_found():
            assert setting({"k": 1}, "k") == 1

        def test_setting_missing():
            assert setting({}, "k", 5) == 5

        def test_numbers_skip_words():
            assert numbers(["1", "two", "3"]) == [1, 3]

        def test_numbers():
            assert numbers(["4"]) == [4]
    """,
}


def test_fixes_that_catch_what_the_failing_tests_raised(make_project):
    """The history corpus's exception-handling shapes: widen an `except` by the class the test
    hit (TypeError beside KeyError; no one class catches both), and catch it around the statement that raised (at the end
    of a loop body `pass` and `continue` are one fix) — two bugs in two functions, so the fix is
    a pair of the two new operators."""
    report = fix(make_project(HANDLERS))
    assert report.status == "fixed", report.message
    notes = " ".join(map(str, report.fix.notes))
    assert "`except KeyError` -> `except (KeyError, TypeError)`" in notes
    assert "wrap `out.append(int(w))` in `try` ... `except ValueError: " in notes
    assert set(report.fix.verified.fail_to_pass) == {
        "tests/test_read.py::test_setting_without_a_table", "tests/test_read.py::test_numbers_skip_words"}


def test_raised_classes_reads_what_the_tests_hit_not_their_assertions():
    messages = ["E   TypeError: 'NoneType' object is not subscriptable",
                "AssertionError: assert 1 == 2",
                "pkg.errors.ParseError: bad input\n  raise ValueError('x')"]
    assert search_module.raised_classes(messages) == ("TypeError", "pkg.errors.ParseError")


UNREAD_AND_MISSING = {
    "shell/__init__.py": "",
    "shell/join.py": """
        def args2sh(args, sep=" "):
            return " ".join(a.strip() for a in args)


        def covers(outer, inner):
            return set(outer).issupserset(inner)
    """,
    "tests/test_join.py": """
        from shell.join import args2sh, covers

        def test_default_separator():
            assert args2sh(["a", "b"]) == "a b"

        def test_own_separator():
            assert args2sh(["a", "b"], sep=",") == "a,b"

        def test_covers():
            assert covers("abc", "ab") and not covers("a", "ab")
    """,
}


def test_fixes_that_read_an_unread_parameter_and_mend_a_missing_attribute(make_project):
    """boltons' shapes: `' '.join` where the function takes `sep` and never reads it, and
    `.issupserset` that the failing test's AttributeError names."""
    report = fix(make_project(UNREAD_AND_MISSING))
    assert report.status == "fixed", report.message
    notes = " ".join(map(str, report.fix.notes))
    assert '`" "` -> `sep` (a parameter never read)' in notes
    assert "`.issupserset` -> `.issuperset`" in notes


MISSING_ATTRIBUTE = {
    "sets/__init__.py": "",
    "sets/cover.py": """
        def covers(outer, inner, strict=False):
            big = set(outer)
            small = set(inner)
            if strict and len(big) <= len(small):
                return False
            count = len(small) + 1 - 1
            return count >= 0 and big.issupserset(small)
    """,
    "tests/test_cover.py": """
        from sets.cover import covers

        def test_covers():
            assert covers("abc", "ab")
    """,
}


def test_an_attribute_the_test_found_missing_is_tried_first(make_project):
    """The AttributeError names the attribute: that evidence outranks the prior's guesses at
    the same line (the prior never saw fix_attribute, and used to put it last)."""
    report = fix(make_project(MISSING_ATTRIBUTE))
    assert report.status == "fixed", report.message
    assert report.search.history[0].candidate.mutations[0].operator == "fix_attribute"


TWICE_MISSING = {
    "sets/__init__.py": "",
    "sets/cover.py": """
        def covers(outer, inner):
            return set(outer).issupserset(inner)


        def covered(inner, outer):
            return set(outer).issupserset(inner)


        def hello():
            return "hi"
    """,
    "tests/test_cover.py": """
        from sets.cover import covers, hello

        def test_covers():
            assert covers("abc", "ab")

        def test_hello():
            assert hello() == "hi"
    """,
}


def test_a_missing_attribute_is_mended_wherever_the_file_reads_it(make_project):
    """boltons ec1ff9f: the same misspelt attribute at two places, one of them tested.  The
    fix mends both (the untested one raises just the same), the single edit is the alternative."""
    report = fix(make_project(TWICE_MISSING))
    assert report.status == "fixed", report.message
    assert [(n.line, n.description.split(" (")[0]) for n in report.fix.notes] == \
        [(2, "`.issupserset` -> `.issuperset`"), (6, "`.issupserset` -> `.issuperset`")]
    assert report.fix.patch.diff().count("+    return set(outer).issuperset(inner)") == 2
    assert [n.line for n in report.alternatives[0].notes] == [2]


UNFORMATTED = {
    "forms/__init__.py": "",
    "forms/check.py": """
        def require(field_name, value):
            if value is None:
                raise ValueError('Field "{field_name}" is '
                                 'required.')
            return value
    """,
    "tests/test_check.py": """
        import pytest

        from forms.check import require

        def test_message_names_the_field():
            with pytest.raises(ValueError, match='Field "email" is required'):
                require("email", None)

        def test_value():
            assert require("age", 3) == 3
    """,
}


def test_a_message_that_spells_a_name_in_braces_becomes_an_f_string(make_project):
    """marshmallow 8f493e6: an f prefix forgotten on a message naming `{field_name}`."""
    report = fix(make_project(UNFORMATTED))
    assert report.status == "fixed", report.message
    assert "an f-string" in " ".join(map(str, report.fix.notes))
    assert "raise ValueError(f'Field \"{field_name}\" is '" in report.fix.patch.edits[0].after


def test_confirmations_run_one_per_lane_with_the_verdicts_of_one_lane(example):
    """With the lanes open, the fix's and an alternative's confirmations (fresh runs of the whole
    suite) run at once, each on its own shadow copy; each verdict is the one a single lane gives
    (a wrong edit is refused on either), in the patches' order."""
    from frognano.repair.patch import FileEdit, Patch

    project = example("calc")
    before = (project / "calc" / "stats.py").read_text()
    right = Patch((FileEdit("calc/stats.py", before, before.replace("return age > 18", "return age >= 18")),))
    wrong = Patch((FileEdit("calc/stats.py", before, before.replace("return age > 18", "return age < 18")),))
    with Workspace(project) as ws, Engine(ws, Settings(lanes=2)) as engine:
        verifier = engine.verifier(engine.diagnose())
        lanes = engine._lane_verifiers(verifier, None)
        if len(lanes) < 2:
            pytest.skip("one CPU: one lane")
        out = search_module._confirm_on(lanes, [wrong, right])
        assert out[0] is None and out[1] is not None and out[1].scope == "suite"
        assert [lane.confirms for lane in lanes] == [1, 1]
        out = search_module._confirm_on(lanes, [right, wrong])
        assert out[0] is not None and out[1] is None
        assert (ws.shadow / "calc" / "stats.py").read_text() == before  # each edit undone on its copy


@pytest.mark.slow
def test_on_a_big_suite_the_second_lane_is_warmed_while_the_candidates_are_listed(example, monkeypatch):
    """From ``_AHEAD_FROM_TESTS`` tests, the other lanes open (and collect their warm sessions)
    while the candidates are listed, not when the ninth candidate needs them; the search's
    history, fix and alternatives are what one lane gives."""
    from frognano.repair.verify import Verifier

    monkeypatch.setattr(search_module, "ALT_SECONDS", 1e9)
    project = example("shapes")
    one = fix(project, lanes=1)
    monkeypatch.setattr(search_module, "_AHEAD_FROM_TESTS", 1)  # shapes has a few dozen tests
    lanes_at_first_check: list[int] = []
    check = Verifier.check

    def first_check(self, patch):
        if not lanes_at_first_check:
            lanes_at_first_check.append(len(engine._lanes))
        return check(self, patch)

    monkeypatch.setattr(Verifier, "check", first_check)
    with Workspace(project) as ws, Engine(ws, Settings(lanes=2)) as engine:
        listed = threading.Event()
        singles = search_module.Search.singles

        def slow_singles(self, locations):
            out = singles(self, locations)
            # Listing took long enough for the lane to open (as on a real project).
            assert self._opening is not None
            self._opening.join()
            listed.set()
            return out

        monkeypatch.setattr(search_module.Search, "singles", slow_singles)
        two = engine.fix()
        assert listed.is_set() and lanes_at_first_check == [1], "the lane was open before the first check"
        assert engine._lanes[0][1]._session is not None, "and its warm session collected"
    assert two.status == one.status == "fixed", (one.message, two.message)
    assert two.fix.patch.diff() == one.fix.patch.diff()
    assert [a.patch.diff() for a in two.search.alternatives] == [a.patch.diff() for a in one.search.alternatives]
    history = [(t.candidate.describe(), t.result.verified, sorted(t.result.fixed)) for t in one.search.history]
    assert [(t.candidate.describe(), t.result.verified, sorted(t.result.fixed)) for t in two.search.history] == history

