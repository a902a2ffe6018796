"""Candidate bugs for synthesis: operator sites in code the test suite actually runs (DESIGN §5).

A function counts as *covered* when some test executes a line of its body.  Sites are taken
from the shared operator catalogue (``frognano.operators.mutations``) in covered functions of
non-test files only, and mutants that are cheap to recognise as useless are dropped before any
test runs:

* no-op edits (``old == new``);
* edits inside a docstring (never observable by a behavioural test);
* edits in body lines no test ever executed (dead code for this suite: the mutant would survive).

Edits outside the body (a parameter default on the ``def`` line, run at import time) are kept
when their function is covered.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterable
from dataclasses import dataclass

from ..operators import Mutation, OperatorError, mutations
from ..sandbox.spectra import CoverageMap, is_test_file
from ..sandbox.workspace import Workspace

__all__ = ["FunctionSpan", "candidate_bugs", "function_spans"]


@dataclass(frozen=True)
class FunctionSpan:
    qualname: str
    def_line: int  # the `def` line (decorators excluded)
    body: range  # body lines (docstring included)
    docstring: range  # lines of the docstring statement, empty when none


def function_spans(source: str) -> dict[str, FunctionSpan]:
    """Top-level functions and methods of top-level classes (the operators' scope)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, FunctionSpan] = {}

    def add(fn: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> None:
        first = fn.body[0]
        doc = range(0)
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            doc = range(first.lineno, (first.end_lineno or first.lineno) + 1)
        found[qualname] = FunctionSpan(qualname, fn.lineno, range(first.lineno, (fn.end_lineno or fn.lineno) + 1), doc)

    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(stmt, stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            for sub in stmt.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(sub, f"{stmt.name}.{sub.name}")
    return found


def _useful(m: Mutation, span: FunctionSpan, covered: set[int]) -> bool:
    if m.old == m.new:
        return False
    lines = range(m.line, max(m.line, m.end_line) + 1)
    if span.docstring and all(line in span.docstring for line in lines):
        return False
    if m.line in span.body:
        return any(line in covered for line in lines)
    return True  # signature (defaults): executed at import time; the function itself is covered


def candidate_bugs(ws: Workspace, coverage: CoverageMap, *, operators: Iterable[str] | None = None,
                   rng: random.Random | None = None) -> list[Mutation]:
    """Every useful mutation in covered functions of the workspace's non-test Python files.

    Source order (files sorted by path), or shuffled by ``rng`` when given.
    """
    ops = list(operators) if operators is not None else None
    out: list[Mutation] = []
    for path in sorted(ws.python_files()):
        if is_test_file(path):
            continue
        covered = set(coverage.index.get(path, {}))
        if not covered:
            continue
        source = ws.read(path)
        spans = function_spans(source)
        live = {name for name, s in spans.items() if covered.intersection(s.body)}
        if not live:
            continue
        try:
            found = mutations(source, path, functions=live, operators=ops)
        except OperatorError:
            continue
        out.extend(m for m in found if m.function in spans and _useful(m, spans[m.function], covered))
    if rng is not None:
        rng.shuffle(out)
    return out
