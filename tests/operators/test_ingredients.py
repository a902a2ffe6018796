"""swap_literal, swap_callee, swap_exception: replacements drawn from the function, the file and
small tables of confusables; what each offers and refuses, its edits and their inverses."""

from __future__ import annotations

import ast
import textwrap

from frognano.operators import CATALOGUE, Mutation, mutations
from frognano.operators.ingredients import (
    MAX_CALLEES,
    MAX_EXCEPTIONS,
    MAX_LITERALS,
    MAX_NUMBERS,
    handler_lines,
)


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _line(source: str, text: str, nth: int = 0) -> int:
    return [i for i, line in enumerate(source.splitlines(), 1) if text in line][nth]


def _at(source: str, op: str, text: str, nth: int = 0) -> list[Mutation]:
    return mutations(source, "pkg/mod.py", operators=[op], lines={_line(source, text, nth)})


def _descs(source: str, op: str, text: str, nth: int = 0) -> list[str]:
    return [m.description for m in _at(source, op, text, nth)]


def _round_trip(source: str, m: Mutation) -> str:
    mutated = m.apply(source)
    ast.parse(mutated)
    inverse = m.inverse()
    assert inverse.operator == CATALOGUE[m.operator].inverse
    assert inverse.apply(mutated) == source
    return mutated


# --- swap_literal --------------------------------------------------------------------------------

PEOPLE = _src('''
    """People records."""

    FIELDS = ("first", "last", "email")


    def full_name(person):
        """Join the name parts: 'first last'."""
        return person['first'] + " " + person['first']


    def initials(person):
        return person["first"][0] + person["last"][0]


    def describe(person, width=30):
        label = f"{person['email']}"
        note = "this message is far too long to be a key or a separator"
        joined = "a" "b"
        if len(label) > 60:
            return label[:width]
        return label + b"x".decode()
''')


def test_swap_literal_fixes_a_wrong_key():
    found = _at(PEOPLE, "swap_literal", "return person['first'] + \" \" + person['first']")
    fix = [m for m in found if m.description == "`'first'` -> `'last'`"]
    assert len(fix) == 2  # both uses of 'first' can become 'last'; the second is the fix
    fixed = _round_trip(PEOPLE, fix[1])
    assert "return person['first'] + \" \" + person['last']" in fixed  # the site's quotes kept
    assert fix[1].function == "full_name" and CATALOGUE["swap_literal"].family == "literal"


def test_swap_literal_order_and_cap():
    descs = _descs(PEOPLE, "swap_literal", 'return person["first"][0] + person["last"][0]')
    # Per string site: the function's own strings first (nearest line), then the file's.
    first = [d for d in descs if d.startswith('`"first"`')]
    assert first[0] == '`"first"` -> `"last"`'
    assert len(first) == MAX_LITERALS
    assert all('"email"' in d or '"last"' in d or '" "' in d or '"a"' in d or '"b"' in d for d in first)
    # Ints are replaced by ints only, and at most MAX_NUMBERS of them per site.
    zeros: dict[int, int] = {}
    for m in _at(PEOPLE, "swap_literal", 'return person["first"][0] + person["last"][0]'):
        if m.old == "0" or m.description.startswith("`0`"):
            assert m.description.split("-> ")[1].strip("`").isdigit()
            zeros[m.start] = zeros.get(m.start, 0) + 1
    assert len(zeros) == 2 and max(zeros.values()) <= MAX_NUMBERS


def test_swap_literal_leaves_docstrings_fstrings_messages_alone():
    all_descs = [m.description for m in mutations(PEOPLE, operators=["swap_literal"])]
    assert not any("Join the name parts" in d for d in all_descs)  # docstring
    assert not any("far too long" in d for d in all_descs)  # a message, not an ingredient or site
    assert not any(d.startswith("`f") for d in all_descs)  # f-strings are not replaced
    assert not _descs(PEOPLE, "swap_literal", 'joined = "a" "b"')  # implicit concatenation
    # bytes only ever become bytes, and no str becomes bytes.
    assert not any(d.startswith('`b"x"`') for d in all_descs)  # no other bytes literal to take
    assert not any("-> `b" in d for d in all_descs)


def test_swap_literal_numbers_come_from_the_file():
    source = _src('''
        RETRIES = 5


        def backoff(attempt):
            delay = 2 ** attempt
            return min(delay, 60)
    ''')
    descs = _descs(source, "swap_literal", "return min(delay, 60)")
    assert descs[0] == "`60` -> `2`"  # the function's own number first
    assert "`60` -> `5`" in descs
    for m in _at(source, "swap_literal", "return min(delay, 60)"):
        _round_trip(source, m)


def test_swap_literal_keeps_a_known_good_spelling_when_quotes_differ():
    source = _src('''
        def quote(word):
            if word == "it's":
                return 'x'
            return word
    ''')
    [m] = [m for m in _at(source, "swap_literal", "return 'x'") if "it" in m.new]
    assert "return \"it's\"" in _round_trip(source, m)


# --- swap_callee ---------------------------------------------------------------------------------

SHAPES = _src('''
    import math
    from math import ceil


    def area(w, h):
        return w * h


    def perimeter(w, h):
        return 2 * (w + h)


    def scale(x):
        return x * 2


    def pages(total, per_page):
        whole = math.floor(total / per_page)
        return ceil(total / per_page) + area(whole, per_page)


    class Basket:
        def __init__(self):
            self.items = []

        def add(self, item):
            self.items.append(item)

        def count(self):
            return len(self.items)

        def weight(self):
            return sum(self.items, 0)

        def total(self):
            return max(self.count(), 0) + min(1, 2)

        def labels(self, tags):
            return sorted(tags.keys())
''')


def test_swap_callee_table_pairs():
    assert "`math.floor` -> `math.ceil`" in _descs(SHAPES, "swap_callee", "whole = math.floor")
    # `ceil` is a bare imported name: `floor` is not bound here, so it would be a NameError.
    assert not any(d.startswith("`ceil`") for d in _descs(SHAPES, "swap_callee", "return ceil("))
    assert "`self.items.append` -> `self.items.extend`" in _descs(SHAPES, "swap_callee", "self.items.append(item)")
    total = _descs(SHAPES, "swap_callee", "return max(self.count(), 0)")
    assert {"`max` -> `min`", "`min` -> `max`"} <= set(total)
    assert "`tags.keys` -> `tags.values`" in _descs(SHAPES, "swap_callee", "sorted(tags.keys())")
    assert "`sorted` -> `reversed`" in _descs(SHAPES, "swap_callee", "sorted(tags.keys())")


def test_swap_callee_respects_shapes():
    # sum(xs, 0) has two arguments: len() takes one.
    assert "`sum` -> `len`" not in _descs(SHAPES, "swap_callee", "return sum(self.items, 0)")
    assert "`len` -> `sum`" in _descs(SHAPES, "swap_callee", "return len(self.items)")
    # `append(item)` takes one argument: insert(i, x) needs two.
    assert not any("insert" in d for d in _descs(SHAPES, "swap_callee", "self.items.append(item)"))


def test_swap_callee_same_arity_names_in_scope():
    descs = _descs(SHAPES, "swap_callee", "return ceil(total / per_page) + area(")
    assert "`area` -> `perimeter`" in descs
    assert "`area` -> `scale`" not in descs  # one parameter, two arguments
    assert "`area` -> `pages`" not in descs  # the enclosing function itself
    methods = _descs(SHAPES, "swap_callee", "return max(self.count(), 0)")
    assert "`self.count` -> `self.weight`" in methods
    assert "`self.count` -> `self.add`" not in methods  # takes an argument
    assert not any("__init__" in d for d in methods)
    per_callee: dict[tuple[int, str], int] = {}
    for m in mutations(SHAPES, operators=["swap_callee"]):
        key = (m.line, m.description.split(" -> ")[0])
        per_callee[key] = per_callee.get(key, 0) + 1
    assert max(per_callee.values()) <= MAX_CALLEES


def test_swap_callee_round_trip_and_inverse_is_offered():
    for m in mutations(SHAPES, "pkg/mod.py", operators=["swap_callee"]):
        mutated = _round_trip(SHAPES, m)
        if m.function != "Basket.total":  # max<->min: the swap back is offered on the bug
            continue
        back = mutations(mutated, "pkg/mod.py", operators=["swap_callee"], lines={m.line})
        assert any((b.start, b.old, b.new) == (m.start, m.new, m.old) for b in back)


def test_swap_callee_fixes_ceil_for_floor():
    correct = "import math\n\n\ndef pages(n, per):\n    return math.ceil(n / per)\n"
    buggy = correct.replace("ceil", "floor")
    fixed = [m.apply(buggy) for m in mutations(buggy, operators=["swap_callee"])]
    assert correct in fixed


# --- swap_exception ------------------------------------------------------------------------------

STORE = _src('''
    from json import JSONDecodeError


    class NotFound(LookupError):
        pass


    class Store:
        def __init__(self, rows):
            self.rows = rows

        def get(self, i):
            try:
                return self.rows[i]
            except KeyError:
                raise NotFound(i)

        def parse(self, text):
            try:
                return int(text)
            except (ValueError, TypeError):
                return None

        def load(self, text):
            try:
                return self.decode(text)
            except JSONDecodeError as exc:
                raise self.error(exc)
            except errors.Missing:
                return None
''')


def test_swap_exception_offers_module_classes_then_confusables():
    descs = _descs(STORE, "swap_exception", "except KeyError:")
    assert "`KeyError` -> `IndexError`" in descs  # the fix for an index lookup
    assert "`KeyError` -> `NotFound`" in descs  # defined and raised in the module
    assert len(descs) <= MAX_EXCEPTIONS
    assert "`NotFound` -> `KeyError`" in _descs(STORE, "swap_exception", "raise NotFound(i)")
    assert CATALOGUE["swap_exception"].family == "exception"


def test_swap_exception_refusals():
    pair = _descs(STORE, "swap_exception", "except (ValueError, TypeError):")
    assert "`ValueError` -> `TypeError`" not in pair and "`TypeError` -> `ValueError`" not in pair
    assert any(d.startswith("`ValueError` -> ") for d in pair)
    assert not _descs(STORE, "swap_exception", "raise self.error(exc)")  # not a class name
    # `errors` is not imported: neither a site nor a replacement can be judged available.
    every = [m.description for m in mutations(STORE, operators=["swap_exception"])]
    assert not any("-> `errors." in d for d in every)
    assert "`JSONDecodeError` -> `KeyError`" in every  # imported classes are sites too


def test_swap_exception_fixes_the_caught_class_and_round_trips():
    correct = STORE.replace("except KeyError:", "except IndexError:")
    fixed = [m for m in mutations(STORE, operators=["swap_exception"]) if m.apply(STORE) == correct]
    assert fixed
    for m in mutations(STORE, "pkg/store.py", operators=["swap_exception"]):
        _round_trip(STORE, m)


def test_swap_literal_takes_keys_quoted_in_docstrings_last():
    # "end" appears only in the module docstring: the one place the file names the right key.
    source = _src('''
        """Timesheet entries: {"day": ..., "start": "HH:MM", "end": "HH:MM"}."""


        def shift(entry):
            start = entry["start"]
            end = entry["start"]
            return end - start
    ''')
    descs = _descs(source, "swap_literal", 'end = entry["start"]')
    assert descs[-1] == '`"start"` -> `"end"`' and '`"start"` -> `"day"`' in descs
    fix = next(m for m in _at(source, "swap_literal", 'end = entry["start"]') if m.new == "end")
    assert 'end = entry["end"]' in _round_trip(source, fix)
    # Prose quotes are not words: `'s the user'` in "it's the user's" is no ingredient.
    prose = '"""It\'s the user\'s key."""\n\ndef f(d):\n    return d["a"]\n'
    assert not mutations(prose, operators=["swap_literal"])


def test_handler_lines_guard_the_try_body():
    source = _src('''
        def read(text, default):
            try:
                value = int(text)
                return value
            except TypeError:
                return default
            except (KeyError, IndexError):
                raise
            except:
                pass
            finally:
                print("done")
            return int(default)
    ''')
    body = _line(source, "value = int(text)")
    assert handler_lines(source, {body}) == {_line(source, "except TypeError:"),
                                             _line(source, "except (KeyError, IndexError):")}
    assert handler_lines(source, {_line(source, "return int(default)")}) == set()  # not in a try
    assert handler_lines("def broken(:\n", {1}) == set()


def test_the_search_reaches_an_except_clause_the_spectra_never_rank(make_project):
    # `except TypeError` never runs when int() raises ValueError: coverage cannot see the
    # clause, so the localiser ranks only the try body; the search looks at the handler too.
    from frognano.config import Settings
    from frognano.repair.engine import Engine
    from frognano.sandbox.workspace import Workspace

    project = make_project({
        "settings.py": '''
            class ConfigError(Exception):
                pass


            def get_int(environ, name):
                raw = environ[name]
                try:
                    return int(raw.strip())
                except TypeError:
                    raise ConfigError(f"{name} must be an integer, not {raw!r}") from None
        ''',
        "tests/test_settings.py": '''
            import pytest

            from settings import ConfigError, get_int


            def test_reads_an_int():
                assert get_int({"PORT": " 80 "}, "PORT") == 80


            def test_malformed_int_is_a_config_error():
                with pytest.raises(ConfigError):
                    get_int({"PORT": "eighty"}, "PORT")
        ''',
    })
    with Workspace(project) as ws, Engine(ws, Settings()) as engine:
        report = engine.fix()
    assert report.status == "fixed", report.message
    notes = " ".join(map(str, report.fix.notes))
    assert "`TypeError` -> `ValueError`" in notes, notes


def test_swap_literal_takes_strings_the_failing_tests_quoted():
    source = _src('''
        def status(ticket):
            if ticket.get("resolved"):
                return "closed"
            return "open"
    ''')
    line = {_line(source, '"closed"')}

    def returned(muts):  # what the edited line returns, per mutation
        return [m.apply(source).splitlines()[min(line) - 1].strip() for m in muts]

    plain = mutations(source, "t.py", operators=["swap_literal"], lines=line)
    assert 'return "done"' not in returned(plain)  # the file never spells it
    heard = mutations(source, "t.py", operators=["swap_literal"], lines=line, ingredients=("closed", "done", "x", "y"))
    assert 'return "done"' in returned(heard) and 'return "closed"' not in returned(heard)
    assert len(heard) - len(plain) == 2  # MAX_MESSAGE_LITERALS more, after the file's own
    done = next(m for m in heard if '"done"' in m.apply(source))
    assert done.inverse().apply(done.apply(source)) == source  # the round trip restores the source
    ints = mutations(_src("def f():\n    return 3\n"), "t.py", operators=["swap_literal"], lines={2}, ingredients=("9",))
    assert all("9" not in m.apply(_src("def f():\n    return 3\n")) for m in ints)  # strings replace strings only
