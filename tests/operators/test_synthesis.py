"""Synthesis injects bugs with the batch-A operators: a green project, a real `synthesize` run
restricted to them, and their families in the summary table and in the written tasks."""

from __future__ import annotations

from frognano.operators import CATALOGUE
from frognano.synthesis.store import read_tasks
from frognano.synthesis.synth import synthesize

from ..conftest import write_project

RECORDS = '''
import math


class NotFound(LookupError):
    pass


def full_name(person):
    return person["first"] + " " + person["last"]


def pages(count, per_page):
    return math.ceil(count / per_page)


def find(rows, i):
    try:
        return rows[i]
    except IndexError:
        raise NotFound(i)


def median(xs):
    ordered = sorted(xs)
    return ordered[len(ordered) // 2]


def balance(credit, debit):
    return credit - debit
'''

TESTS = '''
import pytest

from records import NotFound, balance, find, full_name, median, pages


def test_full_name():
    assert full_name({"first": "Ada", "last": "Lovelace"}) == "Ada Lovelace"


def test_pages():
    assert pages(10, 3) == 4
    assert pages(9, 3) == 3


def test_find():
    assert find([1, 2], 1) == 2
    with pytest.raises(NotFound):
        find([], 0)


def test_median():
    assert median([3, 1, 2]) == 2
    assert median([5]) == 5
    assert median([4, 1, 3, 2]) == 3


def test_balance():
    assert balance(3, 5) == -2
    assert balance(5, 3) == 2
'''

NEW = ["swap_literal", "swap_callee", "swap_exception", "add_one", "clamp"]


def test_synthesis_injects_with_the_new_operators(tmp_path):
    project = write_project(tmp_path / "records", {
        "pyproject.toml": '[project]\nname = "records"\nversion = "0.1"\n',
        "records.py": RECORDS,
        "tests/test_records.py": TESTS,
    })
    out = tmp_path / "tasks.jsonl"
    summary = synthesize([project], out, n=60, seed=5, operators=NEW)  # more than exist: all tried
    families = {CATALOGUE[name].family for name in NEW}
    assert families == {"literal", "callee", "exception", "bound", "wrapper"}
    # The summary (what `frognano synth` prints as its table) has a row per new family, and
    # each of them injected at least one valid bug.
    assert families <= set(summary.families)
    assert all(summary.families[f].valid >= 1 for f in families), {
        f: (s.tried, s.valid, dict(s.skips)) for f, s in summary.families.items()}
    tasks = list(read_tasks(out))
    assert {t.family.split("-")[0] for t in tasks} == families
    by_op = {t.operators[0]: t for t in tasks}
    assert set(by_op) == set(NEW)
    # The injected bugs are the ones the issue names: a wrong key, ceil -> floor, the wrong
    # exception, a shifted index, a clamp that hides negative balances.
    patches = {op: [t.patch for t in tasks if t.operators == [op]] for op in NEW}
    assert any('person["first"]' in p and '-    return person["first"] + " " + person["last"]' in p
               for p in patches["swap_literal"])
    assert any("math.floor(count / per_page)" in p or "math.trunc(count / per_page)" in p
               for p in patches["swap_callee"])
    assert any("except" in p or "raise" in p for p in patches["swap_exception"])
    assert any("max(0, credit - debit)" in p for p in patches["clamp"])
