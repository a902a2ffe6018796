"""The operator catalogue on real libcst trees: every mutation parses, is minimal, and inverts."""

from __future__ import annotations

import ast
import functools
import random
import warnings
from textwrap import dedent
from pathlib import Path

import pytest

from frognano.operators import (
    CATALOGUE,
    FunctionInfo,
    Mutation,
    OperatorError,
    Prepared,
    functions,
    iter_sites,
    mutations,
)

# Realistic, oddly formatted source: comments, a decorator, double spaces, a one-line if.
SOURCE = '''\
"""Shapes and helpers."""
import math

LIMIT = 10


class Rect:
    """A rectangle."""

    kind = "rect"

    def __init__(self, width, height,  scale=1, strict=False):
        self.width = width   # horizontal
        self.height = height
        self.scale = scale
        self.strict = strict

    def area(self):
        return self.width * self.width

    @property
    def is_square(self):
        return self.width == self.height

    def fits(self, other ,margin=0):
        # both sides must fit
        if self.width + margin < other.width and self.height <= other.height:
            return True
        return False

    def grow(self, factor):
        if factor < 0:
            raise ValueError("negative factor")
        else:
            self.width  *=  factor   # odd spacing kept
        self.height = self.height * factor
        return self


def total(xs, start=0, items=[], *, strict=True):
    """Sum with a start."""
    result = start
    count = 0
    for x in xs:
        if x is None:
            continue
        result += x
        count = count + 1
    if not xs:
        # nothing to add
        return None
    return result


def window(xs, n):
    out = []
    half = n // 2
    size = half * 2 - 1
    for i in range(n - 1):
        out.append(xs[i:i + n])
    for j, x in enumerate(xs, 1):
        if j % 2 == 0 or x in out:
            out.append(abs(x - j))
    first = xs[0]
    last = xs[-1]
    if size > LIMIT: size = LIMIT
    return first if first > last else last


def clamp(lo, hi, value):
    if value < lo:
        return lo
    label = "low" + "er"
    span = max(0, hi - lo)
    return min(max(value, lo), hi)


def both(a, b):
    return bool(a and b)


def drain(queue):
    done = []
    while True:
        done.append(queue.pop())
    return sorted(done[1:])[::-1]


def lookup(table, key):
    try:
        value = table[key]
    except (KeyError, IndexError):
        return None
    try:
        value = int(value)
    except ValueError:
        pass
    return str(value)


def join(words, sep=" ", width=8):
    return " ".join(w.ljust(width) for w in words).issupper()


def label(name, kind):
    if not name:
        raise ValueError("no name for {kind} " "given")
    return f"{name} ({kind})"
'''


@functools.lru_cache(maxsize=None)
def _prepared() -> Prepared:
    return Prepared(SOURCE)  # parsing once keeps the file fast; the object is read-only


@functools.lru_cache(maxsize=None)
def _all() -> tuple[Mutation, ...]:
    # As if the failing tests raised TypeError: extend_except and wrap_try need a class to catch.
    return tuple(mutations(SOURCE, "pkg/shapes.py", raised=("TypeError",), ingredients=("issupper",)))


def _select(operators=None, lines=None, functions=None) -> list[Mutation]:
    """mutations(SOURCE, ...) filtered in Python; test_filters checks the real filters agree."""
    return [m for m in _all()
            if (operators is None or m.operator in operators)
            and (lines is None or m.line in lines)
            and (functions is None or m.function in functions)]


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line)


ENUMERABLE = [name for name, op in CATALOGUE.items() if op.enumerable]


def test_catalogue_shape():
    for name, op in CATALOGUE.items():
        assert op.name == name
        assert op.inverse in CATALOGUE, name
        assert op.family in {"operator", "constant", "bound", "name", "control", "statement",
                             "literal", "callee", "exception", "wrapper",
                             "return", "guard", "loop", "slice"}
        assert op.description
        if not op.enumerable:
            assert list(op.sites(None)) == []  # inverse-only: no sites, whatever the function
    assert {"restore_condition", "wrap_call"} <= {
        n for n, op in CATALOGUE.items() if not op.enumerable}


@pytest.mark.parametrize("name", ENUMERABLE)
def test_every_operator_mutates_parses_and_inverts(name):
    prepared = _prepared()
    # As if a test raised TypeError, and said `'str' object has no attribute 'issupper'`.
    sites = iter_sites(prepared, operators=[name], raised=("TypeError",), ingredients=("issupper",))
    checked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (op, ctx, site) in enumerate(sites):
            m = prepared.build(op, ctx, site)
            if m is None:
                continue
            checked += 1
            mutated = m.apply(SOURCE)
            assert mutated != SOURCE
            ast.parse(mutated)
            # Minimal-span text edit == libcst's own whole-module replacement (every site for
            # most operators; a spread sample for the prolific wrong_name, to stay fast).
            if len(sites) < 60 or i % 7 == 0:
                assert mutated == prepared.module.deep_replace(site.old, site.new).code, m
            inverse = m.inverse()
            assert inverse.apply(mutated) == SOURCE
            assert inverse.operator == op.inverse
            # Formatting outside the mutated node is untouched.
            before, after = SOURCE.splitlines(), mutated.splitlines()
            tail = len(before) - m.end_line  # lines after the node
            assert after[: m.line - 1] == before[: m.line - 1]
            if tail:
                assert after[-tail:] == before[-tail:]
            assert m.size >= 1 and m.function and m.description
    assert checked, f"{name} found no site in the sample source"
    assert _select(operators=[name])  # and mutations() reports them


def test_compare_lt_to_le_at_the_right_line():
    line = _line_of("if value < lo:")
    found = [m for m in _select(operators=["compare"])
             if m.line == line and m.description == "`<` -> `<=`"]
    assert len(found) == 1
    m = found[0]
    assert m.function == "clamp" and m.path == "pkg/shapes.py"
    assert m.apply(SOURCE).splitlines()[line - 1] == "    if value <= lo:"
    assert m.old == "" and m.new == "="  # minimal span: only the inserted character


def test_wrong_attribute_in_area():
    found = {m.description: m for m in _select(functions={"Rect.area"}, operators=["wrong_name"])}
    m = found["`self.width` -> `self.height`"]
    assert "return self.width * self.height" in m.apply(SOURCE) or \
        "return self.height * self.width" in m.apply(SOURCE)
    # Methods and properties of the class are not data-attribute candidates for calls.
    assert "`self.width` -> `self.area`" not in found
    fixed = [m for m in found.values() if m.apply(SOURCE).count("return self.width * self.height")]
    assert fixed and all(m.line == _line_of("return self.width * self.width") for m in fixed)


def test_wrong_local_name():
    descs = {m.description for m in _select(functions={"total"}, operators=["wrong_name"])}
    assert "`result` -> `count`" in descs
    assert all("self" not in d for d in descs)


def test_bound_range_n_minus_one():
    line = _line_of("for i in range(n - 1):")
    found = {m.description: m for m in _select(operators=["bound"], lines={line})}
    m = found["`n - 1` -> `n`"]
    assert "for i in range(n):" in m.apply(SOURCE)
    # `n - 1` -> `n + 1` is the very edit arith's `-` -> `+` makes: deduplicated to the first.
    assert "`n - 1` -> `n + 1`" not in found
    assert "`n - 1` -> `n + 1`" in {m.description for m in mutations(SOURCE, operators=["bound"], lines={line})}
    assert any(m.operator == "arith" and m.line == line and (m.old, m.new) == ("-", "+") for m in _all())
    assert m.inverse().operator == "bound"
    # Slice bounds grow and shrink too.
    slice_line = _line_of("out.append(xs[i:i + n])")
    descs = {m.description for m in _select(operators=["bound"], lines={slice_line})}
    assert {"`i` -> `i + 1`", "`i + n` -> `i + n - 1`"} <= descs


def test_drop_operand_inverse_is_add_operand():
    found = [m for m in _select(functions={"both"}, operators=["drop_operand"])]
    assert {m.description for m in found} == {"`a and b` -> `a`", "`a and b` -> `b`"}
    m = next(m for m in found if m.description == "`a and b` -> `a`")
    assert "return bool(a)" in m.apply(SOURCE)
    inv = m.inverse()
    assert inv.operator == "add_operand" and inv.description == "`a` -> `a and b`"
    assert inv.apply(m.apply(SOURCE)) == SOURCE


def test_remove_statement_inverse_is_insert_statement():
    line = _line_of("count = count + 1")
    [m] = _select(operators=["remove_statement"], lines={line})
    assert m.description == "remove `count = count + 1`"
    assert m.inverse().operator == "insert_statement"
    assert m.inverse().description == "insert `count = count + 1`"
    mutated = m.apply(SOURCE)
    assert "count = count + 1" not in mutated and "result += x" in mutated
    # The only statement of a block becomes `pass`.
    only = _line_of('self.width  *=  factor')
    [m] = _select(operators=["remove_statement"], lines={only})
    assert "        else:\n            pass\n" in m.apply(SOURCE)


def test_remove_statement_keeps_comments():
    source = "def f(x):\n    # first\n    y = x\n    # second\n    z = y\n    return z\n"
    [m] = mutations(source, operators=["remove_statement"], lines={3})
    assert m.apply(source) == "def f(x):\n    # first\n    # second\n    z = y\n    return z\n"


def test_remove_condition_dedents_and_restores():
    line = _line_of("if not xs:")
    [m] = _select(operators=["remove_condition"], lines={line})
    mutated = m.apply(SOURCE)
    assert "    # nothing to add\n    return None\n    return result\n" in mutated
    assert m.inverse().operator == "restore_condition"
    assert m.inverse().apply(mutated) == SOURCE
    one_line = _line_of("if size > LIMIT: size = LIMIT")
    [m] = _select(operators=["remove_condition"], lines={one_line})
    assert "\n    size = LIMIT\n    return first" in m.apply(SOURCE)


def test_invert_if_else_keeps_comment_lines():
    [m] = _select(operators=["invert_if_else"])
    mutated = m.apply(SOURCE)
    assert ("        if factor < 0:\n            self.width  *=  factor   # odd spacing kept\n"
            "        else:\n            raise ValueError") in mutated


def test_operator_specific_texts():
    def descs(name, line_text):
        return {m.description for m in _select(operators=[name], lines={_line_of(line_text)})}

    assert "`and` -> `or`" in descs("boolop", "if self.width + margin < other.width")
    assert "`*=` -> `/=`" in descs("arith", "self.width  *=  factor")
    assert "`//` -> `%`" in descs("arith", "half = n // 2")
    assert not descs("arith", 'label = "low" + "er"')  # string concatenation is skipped
    assert "`is` -> `is not`" in descs("compare", "if x is None:")
    assert "`in` -> `not in`" in descs("compare", "if j % 2 == 0 or x in out:")
    assert "`not xs` -> `xs`" in descs("remove_not", "if not xs:")
    assert "`value < lo` -> `not value < lo`" in descs("add_not", "if value < lo:")
    assert {"`0` -> `1`", "`0` -> `-1`"} <= descs("off_by_one", "count = 0")
    assert {"`-1` -> `0`", "`-1` -> `-2`"} <= descs("off_by_one", "last = xs[-1]")
    assert "swap `value` and `lo`" not in descs("swap_args", "return min(max(value, lo), hi)")
    assert "`x - j` -> `j - x`" in descs("swap_args", "out.append(abs(x - j))")
    assert "`abs(x - j)` -> `x - j`" in descs("remove_call", "out.append(abs(x - j))")
    assert {"`return True` -> `return False`", "`return True` -> `return None`"} <= descs(
        "return_value", "            return True")
    assert {"`0` -> `1`", "`True` -> `False`", "`[]` -> `None`"} <= descs(
        "default_arg", "def total(xs, start=0")
    assert "`[]` -> `None`" in descs("constant", "out = []")
    assert "remove `return lo`" in descs("remove_return", "return lo")
    assert not descs("remove_return", "return result")  # a function's final return stays
    assert "swap `half = n // 2` and `size = half * 2 - 1`" in descs("swap_statements", "half = n // 2")
    assert not descs("swap_statements", "first = xs[0]")  # independent statements commute


def test_parenthesised_and_glued_contexts():
    source = ("def f(a, b):\n    if(a):\n        return(a < b)\n    x = a.group(1).decode()\n"
              "    return abs(a - b) * 2\n")
    found = {m.description: m.apply(source) for m in mutations(source)}
    assert "    if(not (a)):\n" in found["`(a)` -> `not (a)`"]
    # `return(x)` -> `return(not (x))`, never `returnnot (x)`.
    assert "        return(not (a < b))\n" in found["`(a < b)` -> `not (a < b)`"]
    assert "        return(None)\n" in found["`return (a < b)` -> `return None`"]
    assert "    return (a - b) * 2\n" in found["`abs(a - b)` -> `(a - b)`"]
    assert "    x = (1).decode()\n" in found["`a.group(1)` -> `(1)`"]
    for text in found.values():
        ast.parse(text)


def test_filters():
    every = list(_all())
    assert len({(m.start, m.old, m.new) for m in every}) == len(every)  # deduplicated
    assert [m.line for m in every] == sorted(m.line for m in every)  # source order
    line = _line_of("if value < lo:")
    by_line = mutations(SOURCE, "pkg/shapes.py", lines={line}, raised=("TypeError",), ingredients=("issupper",))
    assert by_line == _select(lines={line}) and {m.line for m in by_line} == {line}
    by_function = mutations(SOURCE, "pkg/shapes.py", functions={"Rect.grow", "clamp"}, raised=("TypeError",),
                            ingredients=("issupper",))
    assert by_function == _select(functions={"Rect.grow", "clamp"})
    assert {m.function for m in by_function} == {"Rect.grow", "clamp"}
    by_operator = mutations(SOURCE, "pkg/shapes.py", operators=["boolop", "compare"])
    assert by_operator == _select(operators={"boolop", "compare"})
    assert {m.operator for m in by_operator} == {"boolop", "compare"}
    assert mutations(SOURCE, operators=["restore_condition"]) == []  # inverse-only
    assert mutations(SOURCE, lines=set()) == []
    with pytest.raises(OperatorError):
        mutations(SOURCE, operators=["no_such_operator"])
    assert every == mutations(SOURCE, "pkg/shapes.py", raised=("TypeError",), ingredients=("issupper",))


def test_dedup_keeps_the_first():
    # `return True` -> `return False`: return_value and constant would both offer it.
    source = "def f(x):\n    while True:\n        return True\n"
    found = [(m.start, m.old, m.new) for m in mutations(source)]
    assert len(found) == len(set(found))


def test_nested_functions_are_walked_once():
    source = "def outer(a):\n    def inner(b):\n        return b < a\n    return inner\n"
    found = [m for m in mutations(source, operators=["compare"])]
    assert len(found) == 5 and {m.function for m in found} == {"outer"}
    assert [f.qualname for f in functions(source)] == ["outer"]


def test_functions():
    infos = functions(SOURCE)
    names = [f.qualname for f in infos]
    assert names == ["Rect.__init__", "Rect.area", "Rect.is_square", "Rect.fits", "Rect.grow",
                     "total", "window", "clamp", "both", "drain", "lookup", "join", "label"]
    square = infos[2]
    assert square == FunctionInfo("Rect.is_square", _line_of("@property"), _line_of("return self.width == self.height"))


def test_errors_and_serialisation():
    with pytest.raises(OperatorError):
        mutations("def broken(:\n    pass\n")
    with pytest.raises(OperatorError):
        functions("class (")
    m = _select(operators=["compare"])[0]
    with pytest.raises(OperatorError):
        m.apply("x" + SOURCE)
    d = m.to_dict()
    assert d["operator"] == "compare" and Mutation.from_dict(d) == m
    with pytest.raises(OperatorError):
        Mutation.from_dict({"operator": "compare"})
    assert m.end == m.start + len(m.old)


def test_odd_files():
    # No trailing newline, CRLF newlines, tabs, async methods.
    for source in [
        "def f(a, b):\n    return a < b",
        "def f(a, b):\r\n    x = a + b\r\n    return x if x > 0 else -x\r\n",
        "class K:\n\tasync def f(self, a):\n\t\tif a:\n\t\t\tawait a\n\t\treturn [a]\n",
        "# only a comment\n",
        "",
    ]:
        for m in mutations(source):
            mutated = m.apply(source)
            ast.parse(mutated)
            assert m.inverse().apply(mutated) == source


def _qualnames(source: str) -> list[str]:
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, defs):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef):
            names += [f"{node.name}.{f.name}" for f in node.body if isinstance(f, defs)]
    return names


def test_inverse_round_trip_on_project_sources():
    # Property check on real code: every mutation of a sample of functions from each project
    # file round-trips through its inverse and compiles.  Files mid-edit are skipped.
    root = Path(__file__).resolve().parents[1] / "frognano"
    rng = random.Random(0)
    checked = 0
    files = sorted(p for p in root.rglob("*.py") if p.is_file())
    for path in rng.sample(files, min(len(files), 8)):  # the project grows; the test must not
        try:
            source = path.read_text(encoding="utf-8")
            names = _qualnames(source)  # via ast: parsing twice with libcst would double the cost
            picked = rng.sample(names, min(len(names), 3))
            found = mutations(source, path.relative_to(root.parent).as_posix(), functions=picked)
        except (OperatorError, SyntaxError, ValueError, OSError):
            continue
        for i, m in enumerate(found):
            mutated = m.apply(source)
            assert m.inverse().apply(mutated) == source, m
            if i % 25 == 0:  # compiling a whole file per mutation is the slow part: spread sample
                compile(mutated, str(path), "exec")
            checked += 1
    if not checked:
        pytest.skip("no parseable project source")


def test_a_match_statement_is_walked_case_by_case():
    """`match` has no body of its own (more-itertools uses it): the statement pool walked
    `stmt.body` and every search of such a file crashed the CLI."""
    source = ("def kind(x):\n    total = 0\n    match x:\n        case 1:\n            total = 2\n"
              "        case _:\n            total += 3\n    return total\n")
    found = mutations(source, "m.py")
    assert found and all(ast.parse(m.apply(source)) for m in found)
    assert any(m.operator == "insert_statement" for m in found)


def test_wrong_name_never_compares_a_value_with_itself():
    """more-itertools 06f3181: `(r > n)` -> `(n > n)` passed the tests as a constant in
    disguise; the names and attributes beside a comparison are not offered in it."""
    source = (
        "def check(r, pool):\n"
        "    n = len(pool)\n"
        "    if (r < 0) or (r > n):\n"
        "        raise ValueError\n"
        "    return n\n"
        "\n"
        "class Box:\n"
        "    def __init__(self, w, h):\n"
        "        self.w = w\n"
        "        self.h = h\n"
        "\n"
        "    def square(self):\n"
        "        return self.w == self.h\n"
    )
    found = mutations(source, "m.py", operators=["wrong_name"])
    applied = [m.apply(source) for m in found]
    assert not any("(n > n)" in a or "self.h == self.h" in a or "self.w == self.w" in a for a in applied)
    assert any("(pool > n)" in a for a in applied)  # other names still are
    assert any("(r < 0) or (r > r)" not in a and "(n < 0)" in a for a in applied)


def test_per_line_keeps_an_edit_once_for_each_line_that_offers_it():
    """The search lists all its suspicious lines of a file in one call (``per_line``): that must
    be what one call per line gives, an insertion between two lines offered by both; without
    ``per_line`` an edit is listed once."""
    from collections import Counter

    source = dedent('''\
        def windowed(seq, n, fillvalue=None):
            window = list(seq[:n])
            if len(window) < n:
                window = window + [fillvalue] * (n - len(window))
            total = sum(window)
            return window, total
    ''')
    lines = [2, 3, 4, 5, 6]
    one_by_one = [m for line in lines for m in mutations(source, "w.py", lines={line})]
    batched = mutations(source, "w.py", lines=set(lines), per_line=True)
    key = lambda m: (m.line, m.start, m.old, m.new)  # noqa: E731
    assert Counter(map(key, batched)) == Counter(map(key, one_by_one))
    once = mutations(source, "w.py", lines=set(lines))
    assert len(once) < len(batched)  # some edit is offered by two lines here
    assert len({(m.start, m.old, m.new) for m in once}) == len(once)
