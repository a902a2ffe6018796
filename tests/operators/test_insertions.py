"""Batch B operators on real sources: missing returns, copied statements, guards, loop
conditions and slices.  For each: the sites it offers and the ones it must not, what applying
one does (run, where that is the point), and the inverse (exact text round trip, and the named
inverse operator finding an edit back)."""

from __future__ import annotations

import ast
import textwrap
from collections import Counter

import pytest

from frognano.operators import CATALOGUE, Mutation, mutations
from frognano.operators.guards import MAX_GUARDS
from frognano.operators.insertions import MAX_INGREDIENTS

NEW = ["insert_statement", "insert_if", "remove_if", "insert_return", "drop_return", "add_operand",
       "loop_condition", "slice"]


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _offered(source: str, op: str, line_text: str | None = None) -> dict[str, Mutation]:
    lines = {_line(source, line_text)} if line_text else None
    return {m.description: m for m in mutations(source, "m.py", operators=[op], lines=lines)}


def _run(source: str, call: str):
    scope: dict = {}
    exec(compile(source, "m.py", "exec"), scope)
    return eval(call, scope)


def _round_trip(source: str, m: Mutation) -> str:
    mutated = m.apply(source)
    ast.parse(mutated)
    inverse = m.inverse()
    assert inverse.operator == CATALOGUE[m.operator].inverse
    assert inverse.apply(mutated) == source
    return mutated


def _named_inverse_restores(source: str, m: Mutation) -> bool:
    """The operator named as m's inverse, enumerated on the mutated source, has an edit that
    gives back the original program (same AST: brackets may differ)."""
    mutated = m.apply(source)
    want = ast.dump(ast.parse(source))
    return any(ast.dump(ast.parse(back.apply(mutated))) == want
               for back in mutations(mutated, operators=[CATALOGUE[m.operator].inverse]))


def test_catalogue_entries():
    for name in NEW:
        op = CATALOGUE[name]
        assert op.enumerable and op.description
        assert CATALOGUE[op.inverse].inverse == name or op.inverse == name
    assert {CATALOGUE[n].family for n in NEW} == {"statement", "return", "guard", "loop", "slice"}
    assert CATALOGUE["drop_operand"].inverse == "add_operand"
    assert CATALOGUE["remove_statement"].inverse == "insert_statement"


# --------------------------------------------------------------------------------------------
# insert_return / drop_return
# --------------------------------------------------------------------------------------------

RETURNS = _src('''
    import math


    def full_name(person):
        name = person["first"] + " " + person["last"]


    def joined(parts):
        ", ".join(parts)


    def log_all(items, sink):
        for item in items:
            sink.append(item)


    def find(xs, target):
        for i, x in enumerate(xs):
            if x == target:
                found = i
        return -1


    def squares(n):
        for i in range(n):
            yield i * i


    async def fetch(client, key):
        value = await client.get(key)


    class Box:
        def __init__(self, size):
            self.size = size

        def volume(self):
            v = self.size ** 3
            return v
''')


def test_insert_return_where_a_function_falls_off_its_end():
    found = _offered(RETURNS, "insert_return", 'name = person["first"]')
    assert list(found) == ["insert `return name`"]
    fixed = _round_trip(RETURNS, found["insert `return name`"])
    assert _run(fixed, 'full_name({"first": "Ada", "last": "Lovelace"})') == "Ada Lovelace"
    # A value computed and dropped as the last statement gets its `return` back in place.
    [m] = _offered(RETURNS, "insert_return", '", ".join(parts)').values()
    fixed = _round_trip(RETURNS, m)
    assert '    return ", ".join(parts)\n' in fixed
    assert _run(fixed, 'joined(["a", "b"])') == "a, b"


def test_insert_return_in_a_branch_that_falls_through():
    found = _offered(RETURNS, "insert_return", "found = i")
    assert "insert `return found`" in found and len(found) <= 2
    fixed = _round_trip(RETURNS, found["insert `return found`"])
    assert "            found = i\n            return found\n    return -1\n" in fixed
    assert _run(fixed, "find([5, 7, 9], 7)") == 1 and _run(fixed, "find([5], 7)") == -1


def test_insert_return_puts_back_the_keyword_of_a_branch_call():
    source = _src('''
        def coerce(raw, kind):
            if kind == "bool":
                parse_bool(raw)
            elif kind == "int":
                return int(raw)
            else:
                log.append(raw)
            return raw
    ''')
    found = _offered(source, "insert_return", "parse_bool(raw)")
    m = found["`parse_bool(raw)` -> `return parse_bool(raw)`"]
    assert "        return parse_bool(raw)\n" in _round_trip(source, m)
    assert _named_inverse_restores(source, m)  # drop_return drops the keyword of a branch
    # A call made for its effect is not a dropped return value.
    assert not any("-> `return log.append" in d for d in _offered(source, "insert_return", "log.append(raw)"))
    # In a function that returns nothing, an unknown call stays a call.
    assert not _offered("def f(x):\n    helper(x)\n", "insert_return")


def test_insert_return_leaves_procedures_generators_and_init_alone():
    every = mutations(RETURNS, operators=["insert_return"])
    assert {m.function for m in every} == {"full_name", "joined", "find", "fetch"}  # async returns too
    # `sink.append(item)` is a call made for its effect, not a dropped return value.
    assert not _offered(RETURNS, "insert_return", "sink.append(item)")


def test_drop_return_and_back():
    found = _offered(RETURNS, "drop_return", "return v")
    m = found["remove `return v`"]
    assert m.inverse().description == "insert `return v`"
    mutated = _round_trip(RETURNS, m)
    assert _run(mutated, "Box(2).volume()") is None
    assert _named_inverse_restores(RETURNS, m)  # insert_return offers `return v` again
    # `return -1`: only the removal; `-1` alone as a statement is no plausible bug.
    assert list(_offered(RETURNS, "drop_return", "return -1")) == ["remove `return -1`"]
    # And the dropped-keyword form comes back through insert_return's in-place site.
    source = "def total(xs):\n    return sum(xs)\n"
    keyword = _offered(source, "drop_return")["`return sum(xs)` -> `sum(xs)`"]
    assert _named_inverse_restores(source, keyword)


# --------------------------------------------------------------------------------------------
# insert_statement
# --------------------------------------------------------------------------------------------

STATEMENTS = _src('''
    def unique(xs):
        seen = set()
        out = []
        for x in xs:
            if x not in seen:
                out.append(x)
        return out


    def first_repeat(xs):
        seen = set()
        for x in xs:
            if x in seen:
                return x
            seen.add(x)
        return None


    def count_up(n):
        i = 0
        total = 0
        while i < n:
            total += i
        return total


    class Counter:
        def __init__(self, start):
            self.count = start
            self.events = []

        def bump(self, event):
            self.events.append(event)
            return self.count
''')


def test_insert_statement_copies_an_ingredient_from_the_file():
    found = _offered(STATEMENTS, "insert_statement", "out.append(x)")
    assert "insert `seen.add(x)`" in found  # from first_repeat: the names exist in unique too
    fixed = _round_trip(STATEMENTS, found["insert `seen.add(x)`"])
    assert _run(fixed, "unique([3, 1, 3, 2, 1])") == [3, 1, 2]


def test_insert_statement_adds_the_missing_loop_step():
    found = _offered(STATEMENTS, "insert_statement", "total += i")
    fixed = _round_trip(STATEMENTS, found["insert `i += 1`"])
    assert "        total += i\n        i += 1\n    return total\n" in fixed
    assert _run(fixed, "count_up(5)") == 10


def test_insert_statement_advances_before_a_continue():
    source = _src('''
        def words(text):
            out = []
            pos = 0
            while pos < len(text):
                if text[pos] == " ":
                    continue
                start = pos
                while pos < len(text) and text[pos] != " ":
                    pos += 1
                out.append(text[start:pos])
            return out
    ''')
    found = _offered(source, "insert_statement", "continue")
    fixed = _round_trip(source, found["insert `pos += 1`"])
    assert "            pos += 1\n            continue\n" in fixed
    assert _run(fixed, "words('ab  cd')") == ["ab", "cd"]
    # A loop whose body moves its variable before the continue gets no step there.
    moved = _src('''
        def count(text):
            pos = n = 0
            while pos < len(text):
                if text[pos] == " ":
                    pos = pos + 2
                    continue
                n = n + 1
                pos = pos + 1
            return n
    ''')
    assert "insert `pos += 1`" not in _offered(moved, "insert_statement", "continue")


def test_insert_statement_self_attributes_and_limits():
    found = _offered(STATEMENTS, "insert_statement", "self.events.append(event)")
    assert "insert `self.count += 1`" not in found  # no such ingredient in the file
    descs = [m.description for m in mutations(STATEMENTS, operators=["insert_statement"])]
    # Never a second copy of a top-level initialisation, nor a copy next to itself.
    assert "insert `seen = set()`" not in descs and "insert `total = 0`" not in descs
    for m in mutations(STATEMENTS, operators=["insert_statement"]):
        mutated = m.apply(STATEMENTS).splitlines()
        inserted = next(i for i, (a, b) in enumerate(zip(mutated, STATEMENTS.splitlines())) if a != b)
        assert mutated[inserted] not in {mutated[inserted - 1], mutated[inserted + 1]}
    # A handful per line: at most MAX_INGREDIENTS copies for each of the three places a
    # statement anchors (before it, after it, the start of its loop body), plus a loop step.
    per_line = Counter(m.line for m in mutations(STATEMENTS, operators=["insert_statement"]))
    assert max(per_line.values()) <= 3 * MAX_INGREDIENTS + 1


def test_insert_statement_stores_a_forgotten_constructor_parameter():
    source = _src('''
        class Policy:
            def __init__(self, attempts, max_delay, factor=2):
                if max_delay < 0:
                    raise ValueError("negative")
                self.attempts = attempts
                self.factor = factor

            def delay(self, n):
                return min(self.max_delay, self.factor ** n)
    ''')
    found = _offered(source, "insert_statement", "self.factor = factor")
    m = found["insert `self.max_delay = max_delay`"]
    fixed = _round_trip(source, m)
    assert "        self.factor = factor\n        self.max_delay = max_delay\n\n    def delay" in fixed
    assert _run(fixed, "Policy(3, 5).delay(4)") == 5
    # Never a second copy of the constructor's own statements.
    assert "insert `self.attempts = attempts`" not in {
        m.description for m in mutations(source, operators=["insert_statement"])}


def test_insert_if_copies_a_small_if_and_remove_if_undoes_it():
    source = _src('''
        def paragraphs(text):
            result = []
            current = []
            for line in text.splitlines():
                stripped = line.strip()
                if stripped:
                    current.append(stripped)
                elif current:
                    result.append(" ".join(current))
                    current = []
            return result
    ''')
    found = _offered(source, "insert_if", "return result")
    m = found['insert `if current: result.append(" ".join(current)); current = []`']
    fixed = _round_trip(source, m)
    assert ('            current = []\n    if current:\n        result.append(" ".join(current))\n'
            '        current = []\n    return result\n') in fixed
    assert _run(fixed, "paragraphs('a\\nb\\n\\nc')") == ["a b", "c"]
    assert _named_inverse_restores(source, m)
    # remove_if: only small ifs without else (the elif branch is one, the if/elif is not).
    assert not mutations(source, operators=["remove_if"])
    removed = mutations(fixed, operators=["remove_if"])
    assert [r.description for r in removed] == ['remove `if current: result.append(" ".join(current)); current = []`']
    assert removed[0].apply(fixed) == source
    assert _named_inverse_restores(fixed, removed[0])


def test_insert_statement_needs_its_names_bound():
    source = _src('''
        def late(xs):
            for x in xs:
                print(x)
            total = len(xs)
            return total


        def other(xs, total):
            total += len(xs)
            return total
    ''')
    at_loop = _offered(source, "insert_statement", "print(x)")
    # `total += len(xs)` reads `total`, which `late` binds only after the loop.
    assert "insert `total += len(xs)`" not in at_loop
    after = _offered(source, "insert_statement", "total = len(xs)")
    assert "insert `total += len(xs)`" in after


def test_remove_statement_undoes_insert_statement():
    for m in mutations(STATEMENTS, operators=["insert_statement"]):
        _round_trip(STATEMENTS, m)
        assert _named_inverse_restores(STATEMENTS, m), m.description


# --------------------------------------------------------------------------------------------
# add_operand (guards)
# --------------------------------------------------------------------------------------------

GUARDS = _src('''
    def best(items, limit):
        top = None
        for item in items:
            if item.score > top.score or item.score == limit:
                top = item
        return top


    def pop_smaller(stack, x):
        while stack[-1] < x:
            stack.pop()
        return stack


    def repeated(counts, word):
        if counts[word] > 1:
            return True
        return False


    def same(a, b):
        if a == b or a is None:
            return True
        return False
''')


def test_guards_follow_how_the_condition_uses_a_name():
    found = _offered(GUARDS, "add_operand", "if item.score > top.score")
    assert len(found) <= MAX_GUARDS
    m = next(m for m in found.values() if "top is None or" in m.new)
    fixed = _round_trip(GUARDS, m)
    assert "if top is None or item.score > top.score or item.score == limit:" in fixed

    class Item:
        def __init__(self, score):
            self.score = score

    scope: dict = {}
    exec(compile(fixed, "m.py", "exec"), scope)
    assert scope["best"]([Item(3), Item(9), Item(5)], 100).score == 9

    stack = _offered(GUARDS, "add_operand", "while stack[-1] < x")
    assert "`stack[-1] < x` -> `stack and stack[-1] < x`" in stack
    assert "`stack[-1] < x` -> `not stack or stack[-1] < x`" in stack
    fixed = _round_trip(GUARDS, stack["`stack[-1] < x` -> `stack and stack[-1] < x`"])
    assert _run(fixed, "pop_smaller([1, 2], 5)") == []
    member = _offered(GUARDS, "add_operand", "if counts[word] > 1")
    assert "`counts[word] > 1` -> `word in counts and counts[word] > 1`" in member
    fixed = _round_trip(GUARDS, member["`counts[word] > 1` -> `word in counts and counts[word] > 1`"])
    assert _run(fixed, "repeated({}, 'a')") is False


def test_a_returned_test_gets_a_guard_too():
    source = _src('''
        class Session:
            def __init__(self, expires_at=None):
                self.expires_at = expires_at

            def expired(self, now):
                return now >= self.expires_at
    ''')
    found = _offered(source, "add_operand", "return now >= self.expires_at")
    m = found["`now >= self.expires_at` -> `self.expires_at is not None and now >= self.e...`"]
    fixed = _round_trip(source, m)
    assert _run(fixed, "Session().expired(5)") is False and _run(fixed, "Session(3).expired(5)") is True
    assert _named_inverse_restores(source, m)


def test_guards_it_does_not_offer():
    # `==` cannot raise on None, and `a` is already compared with None.
    assert not _offered(GUARDS, "add_operand", "if a == b or a is None")


def test_a_guarded_or_keeps_its_meaning():
    source = "def f(x, lo, hi):\n    if x < lo or x > hi:\n        return 0\n    return x\n"
    found = _offered(source, "add_operand")
    m = found["`x < lo or x > hi` -> `x is not None and (x < lo or x > hi)`"]
    _round_trip(source, m)
    assert _named_inverse_restores(source, m)  # drop_operand, up to the brackets


def test_drop_operand_undoes_every_guard():
    for m in mutations(GUARDS, operators=["add_operand"]):
        _round_trip(GUARDS, m)
        assert _named_inverse_restores(GUARDS, m), m.description


# --------------------------------------------------------------------------------------------
# loop_condition
# --------------------------------------------------------------------------------------------

LOOPS = _src('''
    from collections import deque


    def bfs(graph, start):
        seen = {start}
        order = []
        queue = deque([start])
        while True:
            node = queue.popleft()
            order.append(node)
            for nxt in graph[node]:
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return order


    def serve(requests, handle):
        while True:
            if handle(requests):
                break


    def drain(stack):
        out = []
        while stack:
            out.append(stack.pop())
        return out
''')


def test_while_true_gets_the_collection_it_takes_from():
    found = _offered(LOOPS, "loop_condition", "while True:")
    assert list(found) == ["`while True` -> `while queue`"]  # popped wins over appended-to `order`
    fixed = _round_trip(LOOPS, found["`while True` -> `while queue`"])
    assert _run(fixed, "bfs({1: [2, 3], 2: [3], 3: []}, 1)") == [1, 2, 3]
    assert _named_inverse_restores(LOOPS, found["`while True` -> `while queue`"])
    # A loop that takes from nothing offers nothing; `while stack` can lose its condition.
    assert {m.function for m in mutations(LOOPS, operators=["loop_condition"])} == {"bfs", "drain"}
    [m] = _offered(LOOPS, "loop_condition", "while stack:").values()
    assert m.description == "`while stack` -> `while True`"
    assert _named_inverse_restores(LOOPS, m)


# --------------------------------------------------------------------------------------------
# slice
# --------------------------------------------------------------------------------------------

SLICES = _src('''
    def body(lines, n):
        rest = lines[1:]
        head = lines[:-1]
        first = lines[:n]
        middle = lines[1:n]
        for line in lines:
            print(line)
        return first


    def newest(dates):
        return sorted(dates)


    def palindrome(word):
        return word == word[::-1]


    def collect(xs):
        out = [x for x in xs if x]
        return out
''')


def test_slice_moves_a_bound_to_the_other_end():
    assert set(_offered(SLICES, "slice", "rest = lines[1:]")) == {
        "`lines[1:]` -> `lines[:1]`", "`lines[1:]` -> `lines[:-1]`"}
    assert set(_offered(SLICES, "slice", "head = lines[:-1]")) == {
        "`lines[:-1]` -> `lines[-1:]`", "`lines[:-1]` -> `lines[1:]`"}
    # The last n, not the first: `[:n]` -> `[-n:]` (and `[n:]`).
    assert set(_offered(SLICES, "slice", "first = lines[:n]")) == {
        "`lines[:n]` -> `lines[n:]`", "`lines[:n]` -> `lines[-n:]`"}
    fixed = _round_trip(SLICES, _offered(SLICES, "slice", "first = lines[:n]")["`lines[:n]` -> `lines[-n:]`"])
    assert "    first = lines[-n:]\n" in fixed
    assert not _offered(SLICES, "slice", "middle = lines[1:n]")  # two bounds: bound's business
    for m in mutations(SLICES, operators=["slice"], lines={2, 3, 4}):
        _round_trip(SLICES, m)
        assert _named_inverse_restores(SLICES, m)  # its own inverse


def test_slice_adds_or_drops_a_reversal():
    m = _offered(SLICES, "slice", "return sorted(dates)")["`sorted(dates)` -> `sorted(dates)[::-1]`"]
    fixed = _round_trip(SLICES, m)
    assert _run(fixed, "newest([1, 3, 2])") == [3, 2, 1]
    assert _named_inverse_restores(SLICES, m)
    dropped = _offered(SLICES, "slice", "word == word[::-1]")
    assert list(dropped) == ["`word[::-1]` -> `word`"]
    assert _run(_round_trip(SLICES, dropped["`word[::-1]` -> `word`"]), "palindrome('ab')") is True
    # A returned list the function built may come out backwards; a plain loop is not offered.
    assert "`out` -> `out[::-1]`" in _offered(SLICES, "slice", "return out")
    assert not _offered(SLICES, "slice", "for line in lines")
    assert not _offered(SLICES, "slice", "return first")  # a slice, not a list the function built


@pytest.mark.parametrize("name", NEW)
def test_every_new_operator_round_trips_on_all_samples(name):
    checked = 0
    for source in (RETURNS, STATEMENTS, GUARDS, LOOPS, SLICES):
        for m in mutations(source, "m.py", operators=[name]):
            _round_trip(source, m)
            assert m.line >= 1 and m.size >= 1 and m.description
            checked += 1
    assert checked
