"""add_one/drop_one, wrap, clamp/unclamp: `± 1` on integer-valued expressions and wrappers
where a value's use asks for them; what each offers and refuses, its edits and their inverses."""

from __future__ import annotations

import ast
import textwrap

from frognano.operators import CATALOGUE, Mutation, mutations


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _at(source: str, op: str, text: str) -> list[Mutation]:
    return mutations(source, "pkg/mod.py", operators=[op], lines={_line(source, text)})


def _descs(source: str, op: str, text: str) -> set[str]:
    return {m.description for m in _at(source, op, text)}


def _inverse_is_offered(source: str, m: Mutation) -> str:
    """Apply `m`, check the text round trip, and that the inverse operator itself offers the
    exact undo on the mutated source (so synthesis and repair are mirror images)."""
    mutated = m.apply(source)
    ast.parse(mutated)
    inverse = m.inverse()
    assert inverse.operator == CATALOGUE[m.operator].inverse
    assert inverse.apply(mutated) == source
    offered = mutations(mutated, "pkg/mod.py", operators=[inverse.operator])
    assert any((o.start, o.old, o.new) == (inverse.start, inverse.old, inverse.new) for o in offered), m
    return mutated


TEXT = _src('''
    def middle(xs):
        n = len(xs)
        return xs[n // 2]


    def count_words(text):
        words = text.split()
        return len(words)


    def window(xs, size):
        out = []
        for i in range(len(xs)):
            out.append(xs[i])
        return out


    def lookup(table, key, total):
        value = table[key]
        share = total / 3
        return value, share


    def last_index(xs):
        return len(xs) - 1


    def pairs(n):
        return (n // 2) + 1
''')


def test_add_one_restores_a_dropped_plus_one():
    [fix] = [m for m in _at(TEXT, "add_one", "return len(words)") if m.description == "`len(words)` -> `len(words) + 1`"]
    assert "    return len(words) + 1\n" in _inverse_is_offered(TEXT, fix)
    assert CATALOGUE["add_one"].family == "bound" and CATALOGUE["add_one"].inverse == "drop_one"


def test_add_one_sites():
    middle = _descs(TEXT, "add_one", "return xs[n // 2]")
    assert {"`n // 2` -> `n // 2 + 1`", "`n // 2` -> `n // 2 - 1`", "`n` -> `(n + 1)`"} <= middle
    assert "`len(xs)` -> `len(xs) + 1`" in _descs(TEXT, "add_one", "n = len(xs)")
    assert "`i` -> `i + 1`" in _descs(TEXT, "add_one", "out.append(xs[i])")  # a range loop index
    # range() arguments are bound's; dict keys, floats and literals are not integers to shift.
    assert not _descs(TEXT, "add_one", "for i in range(len(xs)):")
    assert not _descs(TEXT, "add_one", "value = table[key]")
    assert not _descs(TEXT, "add_one", "share = total / 3")
    # `len(xs) - 1` already has its `- 1`: drop_one undoes it; `+ 1 + 1` is nobody's bug.
    assert not _descs(TEXT, "add_one", "return len(xs) - 1")
    assert _descs(TEXT, "add_one", "return (n // 2) + 1") == {"`n` -> `(n + 1)`", "`n` -> `(n - 1)`"}
    for m in mutations(TEXT, operators=["add_one"]):
        _inverse_is_offered(TEXT, m)
    # Comparisons: both sides may shift, unless the other side is a literal (`age + 1 > 18` is
    # off_by_one's `age > 17`).
    source = "def f(xs, i, age):\n    if i < len(xs):\n        return age > 18\n"
    descs = {m.description for m in mutations(source, operators=["add_one"])}
    assert descs == {"`i` -> `i + 1`", "`i` -> `i - 1`", "`len(xs)` -> `len(xs) + 1`",
                     "`len(xs)` -> `len(xs) - 1`"}


def test_drop_one():
    assert _descs(TEXT, "drop_one", "return len(xs) - 1") == {"`len(xs) - 1` -> `len(xs)`"}
    [m] = _at(TEXT, "drop_one", "return (n // 2) + 1")
    assert "    return n // 2\n" in m.apply(TEXT)  # parentheses that served the `+ 1` go too
    assert CATALOGUE["drop_one"].inverse == "add_one"
    source = "def f(xs):\n    n = len(xs)\n    x = 2 * (n + 1)\n    s = 'a' + 1\n    return x + 1\n"
    fixed = {m.description: m.apply(source) for m in mutations(source, operators=["drop_one"])}
    assert "    x = 2 * n\n" in fixed["`(n + 1)` -> `n`"]
    assert set(fixed) == {"`(n + 1)` -> `n`", "`x + 1` -> `x`"}  # never a string's `+ 1`
    for m in mutations(source, "pkg/mod.py", operators=["drop_one"]):
        _inverse_is_offered(source, m)


STOCK = _src('''
    def available(stock, reserved):
        left = stock - reserved
        return left


    def spread(values, lo, hi):
        return hi - lo


    def mid(items, total):
        return items[total / 2]


    def loop(names):
        for i in range(names):
            print(names[i])
        return ", ".join(names)


    def report(counts):
        for key in counts.keys():
            print(key)
        return max(0, counts["a"] - 1)


    def shadowed(len, xs):
        for x in xs:
            pass
        return range(xs)
''')


def test_wrap_sites_fit_the_use():
    assert _descs(STOCK, "wrap", "left = stock - reserved") == {"`stock - reserved` -> `abs(stock - reserved)`"}
    assert _descs(STOCK, "clamp", "left = stock - reserved") == {"`stock - reserved` -> `max(0, stock - reserved)`"}
    assert _descs(STOCK, "wrap", "return items[total / 2]") == {"`total / 2` -> `int(total / 2)`"}
    assert _descs(STOCK, "wrap", "for i in range(names):") == {"`names` -> `len(names)`"}
    assert _descs(STOCK, "wrap", 'return ", ".join(names)') == {"`names` -> `sorted(names)`"}
    assert _descs(STOCK, "wrap", "for key in counts.keys():") == {"`counts.keys()` -> `sorted(counts.keys())`"}
    # A local `len` would shadow the builtin; `return left` is no difference, `print(i)` no use.
    assert not _descs(STOCK, "wrap", "return range(xs)")
    assert not _descs(STOCK, "wrap", "return left")
    assert not _descs(STOCK, "wrap", "print(names[i])")
    assert {CATALOGUE[n].family for n in ("wrap", "clamp", "unclamp")} == {"wrapper"}


def test_wrap_inverse_is_remove_call_and_clamp_pairs_with_unclamp():
    for op in ("wrap", "clamp"):
        found = mutations(STOCK, "pkg/mod.py", operators=[op])
        assert found
        for m in found:
            _inverse_is_offered(STOCK, m)
    assert CATALOGUE["wrap"].inverse == "remove_call"


def test_wrap_lambda_bodies_and_collection_aliases():
    source = _src('''
        def nearest(candidates, value):
            return min(candidates, key=lambda c: c - value)


        def median(samples):
            ordered = samples
            middle = len(ordered) // 2
            return ordered[middle]


        def area(self_like):
            width = self_like.width
            return width * 2
    ''')
    assert "`c - value` -> `abs(c - value)`" in _descs(source, "wrap", "key=lambda c: c - value")
    [m] = _at(source, "wrap", "ordered = samples")
    assert m.description == "`samples` -> `sorted(samples)`"
    _inverse_is_offered(source, m)
    assert not _descs(source, "wrap", "width = self_like.width")  # an alias of no collection


def test_unclamp():
    assert _descs(STOCK, "unclamp", 'return max(0, counts["a"] - 1)') == {'`max(0, counts["a"] - 1)` -> `counts["a"] - 1`'}
    source = "def f(a, b):\n    x = max(a - b, 0) * 2\n    return max(a, b)\n"
    [m] = mutations(source, "pkg/mod.py", operators=["unclamp"])  # max(a, b) is no clamp
    assert m.apply(source) == "def f(a, b):\n    x = (a - b) * 2\n    return max(a, b)\n"
    assert m.inverse().apply(m.apply(source)) == source and m.inverse().operator == "clamp"
