"""One catalogue of AST bug/fix operators, shared by repair (search) and synthesis (injection).

Each operator enumerates *sites* in one function: ``(old_node, new_node, description)`` triples
on the libcst tree.  A site becomes a :class:`Mutation`, a minimal text span replacement of the
original source, so formatting outside the edit is untouched and every mutation has an exact
inverse (swap ``old`` and ``new``).  Repair applies mutations at suspicious lines to look for a
fix; synthesis applies them to inject a bug and records the inverse as the reference fix.

Cost model: :func:`mutations` parses once and resolves positions once.  A site that swaps one
expression for another (most of them) renders just the two expressions and splices; any other
site re-renders only its smallest enclosing statement (never the module) and strips the common
prefix/suffix of the old and new statement text.  Every result is syntax-checked with ``ast`` on
the enclosing statement's lines.  ``lines=`` / ``functions=`` / ``operators=`` filters run before
any text is generated (``lines=`` skips whole functions), so repair pays only for what it asks.

Scope: top-level functions and methods of top-level classes; nested functions and lambdas are
covered by their enclosing function's walk.  Decorators, parameter lists and annotations are not
mutated (parameter defaults are, by ``default_arg`` only).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property
from typing import NamedTuple, Protocol

import libcst as cst
from libcst.metadata import (
    ExpressionContext,
    ExpressionContextProvider,
    MetadataWrapper,
    PositionProvider,
)

__all__ = [
    "CATALOGUE",
    "FunctionContext",
    "FunctionInfo",
    "Mutation",
    "Operator",
    "OperatorError",
    "Site",
    "functions",
    "mutations",
    "prepare",
]


class OperatorError(Exception):
    """Source that does not parse, a mutation that does not match its source, an unknown operator."""


# --------------------------------------------------------------------------------------------
# Mutation: the unit both consumers store and replay
# --------------------------------------------------------------------------------------------

# Tokens for Mutation.size: identifiers/numbers, two-character operators, any other character.
_TOKEN = re.compile(r"\w+|\*\*=?|//=?|<<=?|>>=?|[=!<>+\-*/%&|^@:]=|->|\S")


@dataclass(frozen=True)
class Mutation:
    operator: str  # catalogue name, e.g. "compare"
    path: str  # posix path relative to the project root (may be "")
    start: int  # character offset in the str source where `old` begins
    old: str  # exact text replaced (minimal span)
    new: str  # replacement text
    line: int  # 1-based line where the mutated node starts (matched against suspicious lines)
    end_line: int  # 1-based line where the mutated node ends
    function: str  # qualified name of the enclosing top-level function or method
    description: str  # short human text, e.g. "`<` -> `<=`"

    @property
    def end(self) -> int:
        return self.start + len(self.old)

    @property
    def size(self) -> int:
        """Edit size for ranking: tokens in the larger side of the minimal span (at least 1)."""
        return max(len(_TOKEN.findall(self.old)), len(_TOKEN.findall(self.new)), 1)

    def apply(self, source: str) -> str:
        if source[self.start : self.end] != self.old:
            found = source[self.start : self.end]
            raise OperatorError(
                f"{self.path or '<source>'}:{self.line}: expected {self.old!r} at offset "
                f"{self.start}, found {found!r} ({self.operator}: {self.description})"
            )
        return source[: self.start] + self.new + source[self.end :]

    def inverse(self) -> Mutation:
        op = CATALOGUE.get(self.operator)
        if op is None:
            raise OperatorError(f"unknown operator {self.operator!r}")
        # Text before `start` is unchanged, so `line` holds in the mutated source; the node's end
        # moves by the number of lines the edit added or removed.
        shift = self.new.count("\n") - self.old.count("\n")
        return replace(
            self,
            operator=op.inverse,
            old=self.new,
            new=self.old,
            end_line=max(self.line, self.end_line + shift),
            description=_reverse_description(self.description),
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> Mutation:
        try:
            return cls(**{f.name: d[f.name] for f in fields(cls)})
        except KeyError as exc:
            raise OperatorError(f"mutation record lacks {exc.args[0]!r}") from None


_VERB_PAIRS = [
    ("remove condition ", "restore condition "),
    ("remove ", "insert "),
]


def _reverse_description(text: str) -> str:
    parts = text.split("` -> `")
    if len(parts) == 2 and parts[0].startswith("`") and parts[1].endswith("`"):
        return f"`{parts[1][:-1]}` -> `{parts[0][1:]}`"
    swap = re.fullmatch(r"swap `(.*)` and `(.*)`", text, flags=re.S)
    if swap:
        return f"swap `{swap.group(2)}` and `{swap.group(1)}`"
    for a, b in _VERB_PAIRS:
        if text.startswith(a):
            return b + text[len(a) :]
        if text.startswith(b):
            return a + text[len(b) :]
    return text  # self-describing both ways, e.g. "invert `if c:` branches"


@dataclass(frozen=True)
class FunctionInfo:
    qualname: str  # "helper" or "Rect.area"
    line: int  # first decorator or `def` line
    end_line: int  # last line of the body


# --------------------------------------------------------------------------------------------
# Operator protocol and the per-function context operators read
# --------------------------------------------------------------------------------------------

class Site(NamedTuple):
    """One way an operator can change a function: replace `old` (a node of the tree) by `new`."""

    old: cst.CSTNode
    new: cst.CSTNode
    description: str
    # When `old` is a whole block (statement removal, swaps), these name the statements the
    # mutation is about, so Mutation.line points at them rather than at the block.
    first: cst.CSTNode | None = None
    last: cst.CSTNode | None = None


class Operator(Protocol):
    name: str  # catalogue key
    family: str  # coarse kind for synthesis: operator, constant, bound, name, control, statement
    inverse: str  # catalogue key of the operator that undoes it (may be itself)
    enumerable: bool  # False for inverse-only operators, whose sites() yields nothing
    description: str  # one line for help and docs

    def sites(self, func: FunctionContext) -> Iterator[Site]: ...


class FunctionContext:
    """What operators need to know about one top-level function or method.

    ``nodes`` holds the body's nodes in source order (annotations and decorators left out, so
    operators never mutate typing or decoration); ``parents`` covers the whole function and the
    chain up to the module, which the region logic and precedence checks need.
    """

    def __init__(self, prepared: _Prepared, node: cst.FunctionDef, qualname: str,
                 class_info: _ClassInfo | None) -> None:
        self.prepared = prepared
        self.module = prepared.module
        self.node = node
        self.qualname = qualname
        self.class_info = class_info
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.nodes: list[cst.CSTNode] = []
        if class_info is None:
            self.parents[node] = prepared.module
        else:
            self.parents[node] = class_info.node.body
            self.parents[class_info.node.body] = class_info.node
            self.parents[class_info.node] = prepared.module
        self._walk()

    def _walk(self) -> None:
        # Iterative pre-order walk of the whole function (parents are needed everywhere), but
        # only the body's nodes are offered to operators, minus annotations and decorators;
        # this function's own parameter defaults are read by default_arg directly.
        fn = self.node
        stack: list[tuple[cst.CSTNode, bool]] = [(fn, False)]
        while stack:
            node, keep = stack.pop()
            if keep and isinstance(node, (cst.Annotation, cst.Decorator)):
                keep = False
            if keep:
                self.nodes.append(node)
            for child in reversed(node.children):
                self.parents[child] = node
                stack.append((child, child is fn.body if node is fn else keep))

    # -- small helpers shared by operators -------------------------------------------------
    def of_type(self, *types: type) -> Iterator:
        return (n for n in self.nodes if isinstance(n, types))

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def code(self, node: cst.CSTNode, limit: int = 48) -> str:
        """One-line snippet for descriptions (whitespace collapsed, long text cut)."""
        if isinstance(node, cst.SimpleStatementLine):
            text = "; ".join(self.module.code_for_node(s).strip().rstrip(";") for s in node.body)
        else:
            text = self.module.code_for_node(node)
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 3] + "..."

    @property
    def self_name(self) -> str | None:
        """Name of the instance/class parameter of a method (None for functions, staticmethods)."""
        if self.class_info is None or _decorated(self.node, "staticmethod"):
            return None
        params = [*self.node.params.posonly_params, *self.node.params.params]
        return params[0].name.value if params else None

    @cached_property
    def locals(self) -> dict[str, int]:
        """Local names -> line of first binding (parameters: 0), excluding self/cls.

        Comprehension variables, nested def/class names and nested parameters are left out:
        substituting them elsewhere gives NameErrors, not plausible bugs.
        """
        skip = {"self", "cls", self.self_name}
        names: dict[str, int] = {}
        p = self.node.params
        star = [p.star_arg] if isinstance(p.star_arg, cst.Param) else []
        for param in (*p.posonly_params, *p.params, *star, *p.kwonly_params,
                      *([p.star_kwarg] if p.star_kwarg else [])):
            if param.name.value not in skip:
                names.setdefault(param.name.value, 0)
        contexts = self.prepared.contexts
        comp = self._comprehension_targets
        for node in self.of_type(cst.Name):
            if contexts.get(node) is not ExpressionContext.STORE or id(node) in comp:
                continue
            if isinstance(self.parents.get(node), (cst.Param, cst.FunctionDef, cst.ClassDef)):
                continue
            if node.value not in skip:
                names.setdefault(node.value, self.prepared.positions[node].start.line)
        return names

    @cached_property
    def _comprehension_targets(self) -> set[int]:
        return {id(n) for comp in self.of_type(cst.CompFor) for n in _walk(comp.target)
                if isinstance(n, cst.Name)}

    def is_load(self, node: cst.BaseExpression) -> bool:
        if self.prepared.contexts.get(node) is not ExpressionContext.LOAD:
            return False
        parent = self.parents.get(node)
        # ExpressionContextProvider calls keyword names in f(a=1) loads; they are not.
        return not (isinstance(parent, cst.Arg) and parent.keyword is node)

    def fit(self, old: cst.BaseExpression, new: cst.BaseExpression, *,
            adopt_parens: bool = True) -> cst.BaseExpression:
        """Make `new` safe to stand where `old` stood.

        Keeps old's own parentheses (``(a and b)`` -> ``(a)``), parenthesises when precedence
        requires it (``abs(a - b) * 2`` -> ``(a - b) * 2``), and when `new` would glue onto a
        neighbouring keyword (``if(x)`` -> ``if(not (x))``, not ``ifnot (x)``).
        """
        if adopt_parens and old.lpar:
            return new.with_changes(lpar=(*old.lpar, *new.lpar), rpar=(*new.rpar, *old.rpar))
        if new.lpar:
            return new
        parent = self.parents.get(old)
        if _prec(new) <= _min_prec(parent, old):
            return _parenthesize(new)
        if isinstance(parent, cst.Attribute) and isinstance(new, (cst.Integer, cst.Float, cst.Imaginary)):
            return _parenthesize(new)  # `1.real` is a float literal's syntax error
        before, after = self.prepared.neighbours(old)
        if _is_word(before) or _is_word(after):
            text = self.module.code_for_node(new)
            if (_is_word(before) and _is_word(text[:1])) or (_is_word(after) and _is_word(text[-1:])):
                return _parenthesize(new)
        return new


def _decorated(fn: cst.FunctionDef, name: str) -> bool:
    for d in fn.decorators:
        dec = d.decorator
        if isinstance(dec, cst.Call):
            dec = dec.func
        if isinstance(dec, cst.Name) and dec.value == name:
            return True
        if isinstance(dec, cst.Attribute) and dec.attr.value == name:
            return True
    return False


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _is_word(ch: str) -> bool:
    return bool(ch) and (ch.isalnum() or ch == "_")


def _parenthesize(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


# Python's expression precedence, low to high. Parenthesised nodes count as atoms.
_ATOM = 16
_BIN_PREC = {
    cst.BitOr: 6, cst.BitXor: 7, cst.BitAnd: 8, cst.LeftShift: 9, cst.RightShift: 9,
    cst.Add: 10, cst.Subtract: 10, cst.Multiply: 11, cst.Divide: 11, cst.FloorDivide: 11,
    cst.Modulo: 11, cst.MatrixMultiply: 11, cst.Power: 13,
}


def _prec(node: cst.CSTNode) -> int:
    if getattr(node, "lpar", None):
        return _ATOM
    if isinstance(node, (cst.NamedExpr, cst.Yield, cst.GeneratorExp, cst.StarredElement)):
        return -1  # need parentheses nearly everywhere
    if isinstance(node, cst.Lambda):
        return 0
    if isinstance(node, cst.IfExp):
        return 1
    if isinstance(node, cst.BooleanOperation):
        return 2 if isinstance(node.operator, cst.Or) else 3
    if isinstance(node, cst.UnaryOperation):
        return 4 if isinstance(node.operator, cst.Not) else 12
    if isinstance(node, cst.Comparison):
        return 5
    if isinstance(node, cst.BinaryOperation):
        return _BIN_PREC.get(type(node.operator), 11)
    if isinstance(node, cst.Await):
        return 14
    return _ATOM


def _min_prec(parent: cst.CSTNode | None, child: cst.CSTNode) -> int:
    """A child of `parent` needs precedence above this (conservative: ties get parentheses)."""
    if isinstance(parent, cst.BinaryOperation):
        return _BIN_PREC.get(type(parent.operator), 11)
    if isinstance(parent, cst.UnaryOperation):
        return 4 if isinstance(parent.operator, cst.Not) else 11
    if isinstance(parent, cst.BooleanOperation):
        return 2 if isinstance(parent.operator, cst.Or) else 3
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
        return 5
    if isinstance(parent, cst.IfExp):
        return 1
    if isinstance(parent, cst.Await):
        return 13
    if isinstance(parent, (cst.Attribute, cst.Subscript, cst.Call)):
        return _ATOM - 1  # value of x.a / x[i] / x(...): only atoms
    return -1


# --------------------------------------------------------------------------------------------
# Parsed source: positions, offsets, regions, mutation construction
# --------------------------------------------------------------------------------------------

_NEWLINE = re.compile(r"\r\n|\r|\n")


class _ClassInfo:
    def __init__(self, node: cst.ClassDef) -> None:
        self.node = node
        self.methods = [s for s in _block_body(node.body) if isinstance(s, cst.FunctionDef)]

    @cached_property
    def data_attrs(self) -> tuple[str, ...]:
        """Attributes of instances: `self.x` used or assigned in any method, class-level names,
        properties; minus methods (``self.width`` -> ``self.area`` is not a plausible bug)."""
        found: dict[str, None] = {}
        called: set[str] = set()
        for stmt in _block_body(self.node.body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    target = getattr(small, "target", None)
                    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [target]
                    for t in targets:
                        if isinstance(t, cst.Name):
                            found.setdefault(t.value)
        methods = set()
        for fn in self.methods:
            if _decorated(fn, "property") or _decorated(fn, "cached_property"):
                found.setdefault(fn.name.value)
            else:
                methods.add(fn.name.value)
            params = [*fn.params.posonly_params, *fn.params.params]
            if not params or _decorated(fn, "staticmethod"):
                continue
            me = params[0].name.value
            for n in _walk(fn.body):
                if isinstance(n, cst.Call) and _self_attr(n.func, me):
                    called.add(n.func.attr.value)
                elif _self_attr(n, me):
                    found.setdefault(n.attr.value)
        return tuple(a for a in found if a not in called and a not in methods)


def _self_attr(node: cst.CSTNode, me: str | None) -> bool:
    return (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
            and node.value.value == me)


def _block_body(body: cst.BaseSuite) -> Iterable[cst.CSTNode]:
    return body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else ()


class _Prepared:
    """One parse of a source file with everything mutation construction needs."""

    def __init__(self, source: str) -> None:
        try:
            self.module = cst.parse_module(source)
        except (cst.ParserSyntaxError, ValueError, RecursionError) as exc:
            raise OperatorError(f"source does not parse: {exc}") from None
        self.source = source
        self.wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)  # keep node identity
        self.positions = self.wrapper.resolve(PositionProvider)
        # libcst renders a statement with its final newline even when the file lacks one.
        module = self.module
        self.vsource = source if module.has_trailing_newline or not module.body else source + module.default_newline
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(self.vsource)]
        self._regions: dict[cst.CSTNode, tuple[int, str, str, bool] | None] = {}
        self._lines: dict[cst.CSTNode, tuple[int, int, str, bool]] = {}
        self._newline_len = len(module.code_for_node(cst.TrailingWhitespace()))

    @cached_property
    def contexts(self) -> Mapping[cst.CSTNode, ExpressionContext]:
        return self.wrapper.resolve(ExpressionContextProvider)

    def function_defs(self) -> Iterator[tuple[str, cst.FunctionDef, _ClassInfo | None]]:
        for stmt in self.module.body:
            if isinstance(stmt, cst.FunctionDef):
                yield stmt.name.value, stmt, None
            elif isinstance(stmt, cst.ClassDef):
                info = _ClassInfo(stmt)
                for fn in info.methods:
                    yield f"{stmt.name.value}.{fn.name.value}", fn, info

    def start_line(self, node: cst.CSTNode) -> int:
        decorators = getattr(node, "decorators", ())
        return self.positions[decorators[0] if decorators else node].start.line

    def offset(self, pos: cst.metadata.CodePosition) -> int:
        return self.line_starts[pos.line - 1] + pos.column

    def expression_bounds(self, node: cst.BaseExpression) -> tuple[int, int]:
        """Offsets of `node`'s text in the source, its own parentheses included (positions
        leave them out)."""
        rng = self.positions[node]
        code = self.module.code_for_node
        start = self.offset(rng.start) - sum(len(code(p)) for p in node.lpar)
        end = self.offset(rng.end) + sum(len(code(p)) for p in node.rpar)
        return start, end

    def neighbours(self, node: cst.BaseExpression) -> tuple[str, str]:
        """Characters just before and after `node`'s text."""
        start, end = self.expression_bounds(node)
        return self.vsource[start - 1 : start] if start > 0 else "", self.vsource[end : end + 1]

    # -- regions: the smallest statement whose text we regenerate ----------------------------
    def _is_region(self, ctx: FunctionContext, node: cst.CSTNode) -> bool:
        return (isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
                and isinstance(ctx.parents.get(node), (cst.IndentedBlock, cst.Module)))

    def _region(self, node: cst.CSTNode) -> tuple[int, str, str, bool] | None:
        """(offset, indentation, text, parses) of a region statement rendered by libcst, or
        None if that text is not found where the statement starts (the caller then climbs)."""
        if node in self._regions:
            return self._regions[node]
        found = None
        column = self.positions[node].start.column
        decorators = getattr(node, "decorators", ())
        if decorators:
            column = self.positions[decorators[0]].start.column
        start = self.line_starts[self.start_line(node) - 1]
        indent = self.vsource[start : start + column]
        if not indent.strip():
            text = self._render(node, indent)
            if self.vsource.startswith(text, start):
                found = (start, indent, text, _parses(text, indent))
        self._regions[node] = found
        return found

    def _render(self, node: cst.CSTNode, indent: str) -> str:
        """A statement's text from its first token line on (leading comment lines left out)."""
        if hasattr(node, "leading_lines"):
            node = node.with_changes(leading_lines=())
        if not indent:
            return self.module.code_for_node(node)
        # A statement renders its own indentation only inside a block: render a one-statement
        # block with the statement's absolute indentation and drop the block's header newline.
        block = cst.IndentedBlock(body=[node], indent=indent)
        return self.module.code_for_node(block)[self._newline_len :]

    def build(self, op: Operator, ctx: FunctionContext, site: Site, path: str = "") -> Mutation | None:
        """The Mutation for one site, or None when it changes nothing or breaks the syntax."""
        old, new = site.old, site.new
        first = site.first or old
        last = site.last or first
        line = self.positions[first].start.line
        end_line = max(line, self.positions[last].end.line)
        made = self._splice_expression(ctx, old, new)
        if made is _NOT_APPLICABLE:
            made = self._render_region(ctx, old, new)
        if made is None:
            return None
        start, old_span, new_span = made
        if start + len(old_span) > len(self.source) or not self.source.startswith(old_span, start):
            return None  # only the phantom final newline differs; cannot happen for real edits
        return Mutation(op.name, path, start, old_span, new_span, line, end_line, ctx.qualname,
                        site.description)

    def _splice_expression(self, ctx: FunctionContext, old: cst.CSTNode, new: cst.CSTNode
                           ) -> tuple[int, str, str] | None | object:
        """Fast path for the common case, one expression replaced by another.

        When `old` renders standalone exactly as it reads in the file (no continuation lines
        indented by context), so does its replacement, so rendering the two expressions is
        enough; the syntax check parses the source lines of the enclosing statement with the
        new text spliced in.  Returns the span, None for a rejected site (no change, broken
        syntax), or _NOT_APPLICABLE.
        """
        if not (isinstance(old, cst.BaseExpression) and isinstance(new, cst.BaseExpression)):
            return _NOT_APPLICABLE
        start, end = self.expression_bounds(old)
        code = self.module.code_for_node
        old_code = code(old)
        if self.vsource[start:end] != old_code:
            return _NOT_APPLICABLE
        new_code = code(new)
        if new_code == old_code:
            return None
        statement = ctx.parents.get(old)
        while statement is not None and not self._is_region(ctx, statement):
            statement = ctx.parents.get(statement)
        if statement is not None:
            lo, hi, indent, parsed = self._statement_lines(statement)
            if parsed and lo <= start and end <= hi:
                text = self.vsource[lo:start] + new_code + self.vsource[end:hi]
                if not _parses(text, indent):
                    return None
        p, old_span, new_span = _minimal_span(old_code, new_code)
        return start + p, old_span, new_span

    def _statement_lines(self, node: cst.CSTNode) -> tuple[int, int, str, bool]:
        """(start, end, indentation, parses) of the whole source lines a statement spans."""
        found = self._lines.get(node)
        if found is None:
            first, last = self.start_line(node), self.positions[node].end.line
            lo = self.line_starts[first - 1]
            hi = self.line_starts[last] if last < len(self.line_starts) else len(self.vsource)
            text = self.vsource[lo:hi]
            indent = text[: len(text) - len(text.lstrip(" \t\f"))]
            found = self._lines[node] = (lo, hi, indent, _parses(text, indent))
        return found

    def _render_region(self, ctx: FunctionContext, old: cst.CSTNode, new: cst.CSTNode
                       ) -> tuple[int, str, str] | None:
        """General path: re-render the smallest enclosing statement and diff it."""
        node = old
        # The replaced node is its own region only when it is a statement replaced by a
        # statement that keeps its leading comment lines (which regions leave out).
        if not (self._is_region(ctx, old) and isinstance(new, cst.CSTNode)
                and getattr(new, "leading_lines", None) is getattr(old, "leading_lines", None)):
            node = ctx.parents.get(old)
        region = None
        while node is not None:
            if self._is_region(ctx, node):
                region = self._region(node)
                if region is not None:
                    break
            node = ctx.parents.get(node)
        if region is None:  # nothing located exactly: regenerate the module (slow, always right)
            offset, indent, old_text, parsed = 0, "", self.module.code, True
            new_text = self.module.deep_replace(old, new).code
        else:
            offset, indent, old_text, parsed = region
            new_text = self._render(_replace_path(ctx.parents, node, old, new), indent)
        if new_text == old_text or (parsed and not _parses(new_text, indent)):
            return None
        p, old_span, new_span = _minimal_span(old_text, new_text)
        return offset + p, old_span, new_span


_NOT_APPLICABLE = object()


def _replace_path(parents: Mapping, top: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode
                  ) -> cst.CSTNode:
    """`top` with descendant `old` replaced by `new`, copying only the nodes on the path between
    them (deep_replace would rebuild every node under `top`)."""
    node, replacement = old, new
    while node is not top:
        parent = parents[node]
        replacement = _replace_child(parent, node, replacement)
        node = parent
    return replacement


def _replace_child(parent: cst.CSTNode, child: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    for f in fields(parent):
        value = getattr(parent, f.name)
        if value is child:
            return parent.with_changes(**{f.name: new})
        if isinstance(value, (list, tuple)) and any(v is child for v in value):
            return parent.with_changes(**{f.name: [new if v is child else v for v in value]})
    return parent.deep_replace(child, new)  # not a direct field: let libcst find it


def _common_prefix(a: str, b: str) -> int:
    # Binary search on slice equality: C-speed comparisons instead of a Python char loop.
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _minimal_span(a: str, b: str) -> tuple[int, str, str]:
    # Suffix first: a region's final newline then always stays out of the span, which matters
    # for a file without a trailing newline (the region text has one the file lacks).
    s = _common_prefix(a[::-1], b[::-1])
    a_, b_ = a[: len(a) - s], b[: len(b) - s]
    p = _common_prefix(a_, b_)
    return p, a_[p:], b_[p:]


def _parses(text: str, indent: str) -> bool:
    try:
        ast.parse("if 1:\n" + text if indent else text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


# --------------------------------------------------------------------------------------------
# The operators
# --------------------------------------------------------------------------------------------


class _Op:
    name = ""
    family = ""
    inverse = ""
    enumerable = True
    description = ""

    def sites(self, func: FunctionContext) -> Iterator[Site]:
        return iter(())

    def __repr__(self) -> str:
        return f"<operator {self.name}>"


_REL = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">",
        cst.GreaterThanEqual: ">=", cst.Equal: "==", cst.NotEqual: "!="}
_NEGATED = {cst.Is: cst.IsNot, cst.IsNot: cst.Is, cst.In: cst.NotIn, cst.NotIn: cst.In}
_CMP_TEXT = {**_REL, cst.Is: "is", cst.IsNot: "is not", cst.In: "in", cst.NotIn: "not in"}


class Compare(_Op):
    name, family, inverse = "compare", "operator", "compare"
    description = "flip a comparison: < <= > >= == != to one another, is/is not, in/not in"

    def sites(self, func):
        for node in func.of_type(cst.Comparison):
            for i, target in enumerate(node.comparisons):
                op = target.operator
                kind = type(op)
                kinds = [k for k in _REL if k is not kind] if kind in _REL else [_NEGATED.get(kind)]
                for new_kind in filter(None, kinds):
                    ws = {"whitespace_before": op.whitespace_before, "whitespace_after": op.whitespace_after}
                    comparisons = list(node.comparisons)
                    comparisons[i] = target.with_changes(operator=new_kind(**ws))
                    yield Site(node, node.with_changes(comparisons=comparisons),
                               f"`{_CMP_TEXT[kind]}` -> `{_CMP_TEXT[new_kind]}`")


_BIN_TEXT = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.Divide: "/",
             cst.FloorDivide: "//", cst.Modulo: "%", cst.Power: "**", cst.BitAnd: "&",
             cst.BitOr: "|", cst.BitXor: "^", cst.LeftShift: "<<", cst.RightShift: ">>"}
_BIN_BY_TEXT = {v: k for k, v in _BIN_TEXT.items()}
_AUG_TEXT = {cst.AddAssign: "+", cst.SubtractAssign: "-", cst.MultiplyAssign: "*",
             cst.DivideAssign: "/", cst.FloorDivideAssign: "//", cst.ModuloAssign: "%",
             cst.PowerAssign: "**", cst.BitAndAssign: "&", cst.BitOrAssign: "|",
             cst.BitXorAssign: "^", cst.LeftShiftAssign: "<<", cst.RightShiftAssign: ">>"}
_AUG_BY_TEXT = {v: k for k, v in _AUG_TEXT.items()}
# Symmetric, so arith is its own inverse.
_ARITH_SWAPS = {"+": ["-"], "-": ["+"], "*": ["/", "//", "**"], "/": ["*", "//"],
                "//": ["*", "/", "%"], "%": ["//"], "**": ["*"], "&": ["|", "^"],
                "|": ["&", "^"], "^": ["&", "|"], "<<": [">>"], ">>": ["<<"]}


def _is_str(node: cst.CSTNode) -> bool:
    return isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))


class Arith(_Op):
    name, family, inverse = "arith", "operator", "arith"
    description = "swap an arithmetic or bitwise operator (+ -, * / // % **, & | ^, << >>), augmented too"

    def sites(self, func):
        for node in func.of_type(cst.BinaryOperation, cst.AugAssign):
            if isinstance(node, cst.BinaryOperation):
                # String concatenation/formatting/repetition: swapping gives TypeErrors, not bugs.
                if _is_str(node.left) or _is_str(node.right):
                    continue
                text, by_text, suffix = _BIN_TEXT.get(type(node.operator)), _BIN_BY_TEXT, ""
            else:
                if _is_str(node.value):
                    continue
                text, by_text, suffix = _AUG_TEXT.get(type(node.operator)), _AUG_BY_TEXT, "="
            op = node.operator
            for other in _ARITH_SWAPS.get(text, ()):
                new_op = by_text[other](whitespace_before=op.whitespace_before,
                                        whitespace_after=op.whitespace_after)
                yield Site(node, node.with_changes(operator=new_op),
                           f"`{text}{suffix}` -> `{other}{suffix}`")


class BoolOp(_Op):
    name, family, inverse = "boolop", "operator", "boolop"
    description = "swap `and` and `or`"

    def sites(self, func):
        for node in func.of_type(cst.BooleanOperation):
            op = node.operator
            is_and = isinstance(op, cst.And)
            new_op = (cst.Or if is_and else cst.And)(whitespace_before=op.whitespace_before,
                                                      whitespace_after=op.whitespace_after)
            yield Site(node, node.with_changes(operator=new_op),
                       "`and` -> `or`" if is_and else "`or` -> `and`")


def _conditions(func: FunctionContext) -> Iterator[cst.BaseExpression]:
    """Expressions used as conditions: if/elif/while tests, ternary tests, and/or operands,
    and returned comparisons."""
    for node in func.nodes:
        if isinstance(node, (cst.If, cst.While, cst.IfExp)):
            yield node.test
        elif isinstance(node, cst.BooleanOperation):
            yield node.left
            yield node.right
        elif isinstance(node, cst.Return) and isinstance(node.value, cst.Comparison):
            yield node.value


class AddNot(_Op):
    name, family, inverse = "add_not", "control", "remove_not"
    description = "negate a condition: `c` -> `not c`"

    def sites(self, func):
        for cond in _conditions(func):
            if isinstance(cond, cst.UnaryOperation) and isinstance(cond.operator, cst.Not):
                continue  # `not not c` is no bug anyone writes; remove_not covers the other way
            inner = _parenthesize(cond) if _prec(cond) <= 4 else cond
            new = cst.UnaryOperation(operator=cst.Not(), expression=inner)
            yield Site(cond, func.fit(cond, new, adopt_parens=False),
                       f"`{func.code(cond)}` -> `not {func.code(inner)}`")


class RemoveNot(_Op):
    name, family, inverse = "remove_not", "control", "add_not"
    description = "drop a negation: `not x` -> `x`"

    def sites(self, func):
        for node in func.of_type(cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                yield Site(node, func.fit(node, node.expression),
                           f"`{func.code(node)}` -> `{func.code(node.expression)}`")


def _int_value(node: cst.CSTNode) -> tuple[cst.BaseExpression, int] | None:
    """(literal node, value) for `7` and `-7`; None otherwise."""
    if (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
            and isinstance(node.expression, cst.Integer) and not node.expression.lpar):
        inner = _int_value(node.expression)
        return (node, -inner[1]) if inner else None
    if isinstance(node, cst.Integer):
        try:
            return node, int(node.evaluated_value)
        except (ValueError, SyntaxError):
            return None
    return None


def _int_node(value: int, like: str = "") -> cst.BaseExpression:
    # Keep the literal's base: 0x10 -> 0x11, not 17.
    prefix = like[:2].lower()
    fmt = {"0x": hex, "0o": oct, "0b": bin}.get(prefix, str)
    text = fmt(abs(value))
    if value < 0:
        return cst.UnaryOperation(operator=cst.Minus(), expression=cst.Integer(text))
    return cst.Integer(text)


class OffByOne(_Op):
    name, family, inverse = "off_by_one", "bound", "off_by_one"
    description = "integer constant n -> n + 1 and n - 1"

    def sites(self, func):
        for node in func.nodes:
            found = _int_value(node)
            if found is None:
                continue
            parent = func.parent(node)
            if isinstance(node, cst.Integer) and _int_value(parent) is not None:
                continue  # the `7` of `-7`: handled as the whole negative literal
            if isinstance(parent, cst.Attribute):
                continue  # `1 .real` and friends
            literal, value = found
            digits = literal.value if isinstance(literal, cst.Integer) else literal.expression.value
            for delta in (1, -1):
                new = func.fit(node, _int_node(value + delta, digits))
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


def _is_one(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Integer) and not node.lpar and node.value == "1"


def _call_name(node: cst.Call) -> str | None:
    if isinstance(node.func, cst.Name):
        return node.func.value
    if isinstance(node.func, cst.Attribute):
        return node.func.attr.value
    return None


def _bound_exprs(func: FunctionContext) -> Iterator[tuple[cst.BaseExpression, bool]]:
    """(expression, may_grow): slice bounds, range() start/stop, enumerate() start, and
    `x[i ± 1]` indices (these may only shrink: `d[key]` -> `d[key + 1]` is noise)."""
    for node in func.nodes:
        if isinstance(node, cst.Slice):
            for e in (node.lower, node.upper):
                if e is not None:
                    yield e, True
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            args = node.args
            if any(a.star for a in args):
                continue
            positional = [a.value for a in args if a.keyword is None]
            if node.func.value == "range" and len(positional) == len(args):
                yield from ((e, True) for e in positional[:2])
            elif node.func.value == "enumerate":
                start = [a.value for a in args if a.keyword and a.keyword.value == "start"]
                yield from ((e, True) for e in (positional[1:2] or start))
        elif isinstance(node, cst.Index):
            v = node.value
            if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, (cst.Add, cst.Subtract)) \
                    and _is_one(v.right):
                yield v, False


class Bound(_Op):
    name, family, inverse = "bound", "bound", "bound"
    description = "shift a slice bound, range()/enumerate() argument or index: E -> E ± 1, X ± 1 -> X"

    def sites(self, func):
        for e, may_grow in _bound_exprs(func):
            if _int_value(e) is not None:
                continue  # plain literals belong to off_by_one
            if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, (cst.Add, cst.Subtract)) \
                    and _is_one(e.right):
                # X + 1 -> X, X - 1 -> X, and X + 1 <-> X - 1: the inverses of E -> E ± 1.
                flipped = (cst.Subtract if isinstance(e.operator, cst.Add) else cst.Add)(
                    whitespace_before=e.operator.whitespace_before,
                    whitespace_after=e.operator.whitespace_after)
                for new in (func.fit(e, e.left), e.with_changes(operator=flipped)):
                    yield Site(e, new, f"`{func.code(e)}` -> `{func.code(new)}`")
            elif may_grow:
                left = _parenthesize(e) if _prec(e) < 10 else e
                for op in (cst.Add, cst.Subtract):
                    new = cst.BinaryOperation(left=left, operator=op(), right=cst.Integer("1"))
                    new = func.fit(e, new, adopt_parens=False)
                    yield Site(e, new, f"`{func.code(e)}` -> `{func.code(new)}`")


_COMMUTATIVE_CALLS = {"max", "min", "print"}
_NON_COMMUTATIVE = (cst.Subtract, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power,
                    cst.LeftShift, cst.RightShift)


class SwapArgs(_Op):
    name, family, inverse = "swap_args", "name", "swap_args"
    description = "swap adjacent positional arguments, or the operands of - / // % ** << >>"

    def sites(self, func):
        for node in func.of_type(cst.Call, cst.BinaryOperation):
            if isinstance(node, cst.Call):
                if _call_name(node) in _COMMUTATIVE_CALLS:
                    continue
                args = node.args
                for i in range(len(args) - 1):
                    a, b = args[i], args[i + 1]
                    if a.keyword or b.keyword or a.star or b.star:
                        continue
                    new_args = list(args)
                    new_args[i] = a.with_changes(value=b.value)  # commas and spacing stay put
                    new_args[i + 1] = b.with_changes(value=a.value)
                    yield Site(node, node.with_changes(args=new_args),
                               f"swap `{func.code(a.value)}` and `{func.code(b.value)}`")
            elif isinstance(node.operator, _NON_COMMUTATIVE):
                if _is_str(node.left) or _is_str(node.right):
                    continue
                p = _BIN_PREC[type(node.operator)]
                left, right = node.right, node.left
                if _prec(left) < p or (p == 13 and _prec(left) <= p):  # ** is right-associative
                    left = _parenthesize(left)
                if _prec(right) <= p:
                    right = _parenthesize(right)
                new = node.with_changes(left=left, right=right)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


MAX_NAME_CANDIDATES = 8  # substitutes per use; the nearest-bound names are the plausible ones


class WrongName(_Op):
    name, family, inverse = "wrong_name", "name", "wrong_name"
    description = "use another local variable, or another attribute of self (`self.w` -> `self.h`)"

    def sites(self, func):
        me = func.self_name
        attrs = func.class_info.data_attrs if (func.class_info and me) else ()
        for node in func.of_type(cst.Name, cst.Attribute):
            if isinstance(node, cst.Name):
                line = func.prepared.positions[node].start.line
                if node.value not in func.locals or not func.is_load(node):
                    continue
                # Names bound before this line, nearest first; later ones would be unbound.
                bound = [(n, ln) for n, ln in func.locals.items() if n != node.value and ln < line]
                bound.sort(key=lambda item: -item[1])
                for other, _ in bound[:MAX_NAME_CANDIDATES]:
                    yield Site(node, node.with_changes(value=other), f"`{node.value}` -> `{other}`")
            elif _self_attr(node, me) and node.attr.value in attrs and func.is_load(node):
                parent = func.parent(node)
                if isinstance(parent, cst.Call) and parent.func is node:
                    continue
                others = [a for a in attrs if a != node.attr.value][:MAX_NAME_CANDIDATES]
                for other in others:
                    new = node.with_changes(attr=node.attr.with_changes(value=other))
                    yield Site(node, new, f"`{me}.{node.attr.value}` -> `{me}.{other}`")


class DropOperand(_Op):
    name, family, inverse = "drop_operand", "control", "add_operand"
    description = "drop one operand of and/or: `a and b` -> `a` or `b`"

    def sites(self, func):
        for node in func.of_type(cst.BooleanOperation):
            for kept in (node.left, node.right):
                new = func.fit(node, kept)
                yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


def _replace_in_block(block: cst.IndentedBlock, index: int,
                      stmts: list[cst.BaseStatement], trailing: Iterable[cst.EmptyLine] = ()
                      ) -> cst.IndentedBlock:
    """Block with body[index] replaced by `stmts` (possibly none).  Comment lines above the
    replaced statement move onto what follows, so edits never delete comments."""
    old = block.body[index]
    carried = [*old.leading_lines, *trailing] if not stmts else list(trailing)
    if stmts:
        stmts = [stmts[0].with_changes(leading_lines=(*old.leading_lines, *stmts[0].leading_lines)),
                 *stmts[1:]]
    rest = list(block.body[index + 1 :])
    footer = block.footer
    if carried:
        if rest:
            rest[0] = rest[0].with_changes(leading_lines=(*carried, *rest[0].leading_lines))
        else:
            footer = (*carried, *footer)
    return block.with_changes(body=[*block.body[:index], *stmts, *rest], footer=footer)


class RemoveCondition(_Op):
    name, family, inverse = "remove_condition", "control", "restore_condition"
    description = "drop an if (no else): its body runs unconditionally, dedented in place"

    def sites(self, func):
        for block in func.of_type(cst.IndentedBlock):
            for i, stmt in enumerate(block.body):
                if not isinstance(stmt, cst.If) or stmt.orelse is not None:
                    continue
                body = stmt.body
                if isinstance(body, cst.IndentedBlock):
                    stmts, trailing = list(body.body), body.footer
                else:  # `if c: a; b` on one line
                    stmts = [cst.SimpleStatementLine(body=body.body, trailing_whitespace=body.trailing_whitespace)]
                    trailing = ()
                if not stmts:
                    continue
                yield Site(block, _replace_in_block(block, i, stmts, trailing),
                           f"remove condition `if {func.code(stmt.test)}:`", stmt, stmt)


class InvertIfElse(_Op):
    name, family, inverse = "invert_if_else", "control", "invert_if_else"
    description = "swap the branches of `if c: A else: B`"

    def sites(self, func):
        for node in func.of_type(cst.If):
            if not isinstance(node.orelse, cst.Else):
                continue
            a, b = node.body, node.orelse.body
            if isinstance(a, cst.IndentedBlock) and isinstance(b, cst.IndentedBlock):
                # Comments after the colons stay on their lines.
                a, b = b.with_changes(header=a.header), a.with_changes(header=b.header)
            else:
                a, b = b, a
            new = node.with_changes(body=a, orelse=node.orelse.with_changes(body=b))
            yield Site(node, new, f"invert `if {func.code(node.test)}:` branches")


def _statement_removal(block: cst.IndentedBlock, index: int, description: str) -> Site:
    stmt = block.body[index]
    if len(block.body) == 1:  # a block cannot be empty
        pass_line = cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=stmt.leading_lines)
        return Site(stmt, pass_line, description)
    return Site(block, _replace_in_block(block, index, []), description, stmt, stmt)


def _single(stmt: cst.CSTNode) -> cst.BaseSmallStatement | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def _is_plain_statement(small: cst.CSTNode | None) -> bool:
    """Assignments and expression statements other than docstrings, `...` and bare strings."""
    if isinstance(small, (cst.Assign, cst.AugAssign)):
        return True
    if isinstance(small, cst.AnnAssign):
        return small.value is not None
    if isinstance(small, cst.Expr):
        return not (_is_str(small.value) or isinstance(small.value, cst.Ellipsis))
    return False


class RemoveStatement(_Op):
    name, family, inverse = "remove_statement", "statement", "insert_statement"
    description = "remove an assignment or expression statement (`pass` if it was alone)"

    def sites(self, func):
        for block in func.of_type(cst.IndentedBlock):
            for i, stmt in enumerate(block.body):
                if _is_plain_statement(_single(stmt)):
                    yield _statement_removal(block, i, f"remove `{func.code(stmt)}`")


class RemoveReturn(_Op):
    name, family, inverse = "remove_return", "statement", "insert_statement"
    description = "remove an early return (any return but a function's last statement)"

    def sites(self, func):
        for block in func.of_type(cst.IndentedBlock):
            owner = func.parent(block)
            for i, stmt in enumerate(block.body):
                if not isinstance(_single(stmt), cst.Return):
                    continue
                if isinstance(owner, cst.FunctionDef) and i == len(block.body) - 1:
                    continue  # the final return is the function's result, not an early exit
                yield _statement_removal(block, i, f"remove `{func.code(stmt)}`")


class RemoveCall(_Op):
    name, family, inverse = "remove_call", "statement", "wrap_call"
    description = "unwrap a one-argument call: `f(x)` -> `x`"

    def sites(self, func):
        for node in func.of_type(cst.Call):
            if len(node.args) != 1 or not isinstance(node.func, (cst.Name, cst.Attribute)):
                continue
            arg = node.args[0]
            if arg.keyword is not None or arg.star:
                continue
            value = arg.value
            if not value.lpar and "\n" in func.module.code_for_node(value):
                value = _parenthesize(value)  # its line breaks relied on the call's brackets
            new = func.fit(node, value)
            yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")


def _name_is(node: cst.CSTNode | None, *values: str) -> bool:
    return isinstance(node, cst.Name) and node.value in values


class ReturnValue(_Op):
    name, family, inverse = "return_value", "constant", "return_value"
    description = "change a returned value: `return X` -> `return None`, True <-> False"

    def sites(self, func):
        for node in func.of_type(cst.Return):
            value = node.value
            if value is None or _name_is(value, "None") or isinstance(value, cst.Yield):
                continue
            choices = ["None"]
            if _name_is(value, "True", "False"):
                choices = ["False" if value.value == "True" else "True", "None"]
            for choice in choices:
                new = func.fit(value, cst.Name(choice), adopt_parens=False)
                yield Site(value, new, f"`return {func.code(value)}` -> `return {choice}`")


def _is_empty_literal(node: cst.CSTNode) -> bool:
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return not node.elements
    if isinstance(node, cst.Dict):
        return not node.elements
    if isinstance(node, cst.SimpleString):
        return len(node.value) - len(node.prefix) in (2, 6)  # '' "" '''''' """"""
    return False


def _constant_changes(func: FunctionContext, node: cst.CSTNode, *, defaults: bool
                      ) -> Iterator[Site]:
    if _name_is(node, "True", "False"):
        other = "False" if node.value == "True" else "True"
        targets = [other, "None"]
    elif _name_is(node, "None"):
        targets = ["0"] if defaults else ["True", "False"]
    elif _is_empty_literal(node):
        targets = ["None"]
    elif defaults and _int_value(node) is not None:
        literal, value = _int_value(node)
        digits = literal.value if isinstance(literal, cst.Integer) else literal.expression.value
        for delta in (1, -1):
            new = func.fit(node, _int_node(value + delta, digits), adopt_parens=False)
            yield Site(node, new, f"`{func.code(node)}` -> `{func.code(new)}`")
        return
    else:
        return
    for target in targets:
        new = cst.Integer(target) if target.isdigit() else cst.Name(target)
        new = func.fit(node, new, adopt_parens=False)
        yield Site(node, new, f"`{func.code(node)}` -> `{target}`")


class DefaultArg(_Op):
    name, family, inverse = "default_arg", "constant", "default_arg"
    description = "change a parameter default: True <-> False, None -> 0, n -> n ± 1, [] {} () '' -> None"

    def sites(self, func):
        p = func.node.params
        for param in (*p.posonly_params, *p.params, *p.kwonly_params):
            if param.default is not None:
                yield from _constant_changes(func, param.default, defaults=True)


class Constant(_Op):
    name, family, inverse = "constant", "constant", "constant"
    description = "change a constant: True <-> False, True/False <-> None, [] {} () '' -> None (ints: off_by_one)"

    def sites(self, func):
        for node in func.nodes:
            parent = func.parent(node)
            if isinstance(parent, cst.Return):
                continue  # returned constants belong to return_value
            if isinstance(parent, cst.Attribute) and parent.value is node:
                continue  # "".join(...): None.join is no plausible bug
            if isinstance(parent, cst.ConcatenatedString):
                continue  # `"" "x"`: None cannot stand in an implicit concatenation
            if isinstance(parent, cst.ComparisonTarget) and isinstance(parent.operator, (cst.Is, cst.IsNot)) \
                    and _name_is(node, "None"):
                continue  # `x is None` -> `x is True`: compare's `is not` is the plausible bug
            if isinstance(node, (cst.Name, cst.List, cst.Tuple, cst.Set, cst.Dict, cst.SimpleString)):
                if isinstance(node, cst.Name) and not func.is_load(node):
                    continue
                yield from _constant_changes(func, node, defaults=False)


def _paths(node: cst.CSTNode, skip: set) -> set[str]:
    """Names and dotted attribute paths (`self.items`) mentioned under `node`."""
    out = set()
    for n in _walk(node):
        if isinstance(n, cst.Name) and n.value not in skip:
            out.add(n.value)
        elif isinstance(n, cst.Attribute):
            dotted = _dotted(n)
            if dotted:
                out.add(dotted)
    return out


def _dotted(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def _writes(small: cst.CSTNode, skip: set) -> set[str]:
    if isinstance(small, cst.Assign):
        return set().union(*(_paths(t.target, skip) for t in small.targets))
    if isinstance(small, (cst.AugAssign, cst.AnnAssign)):
        return _paths(small.target, skip)
    return _paths(small, skip)  # an expression statement may mutate anything it touches


class SwapStatements(_Op):
    name, family, inverse = "swap_statements", "statement", "swap_statements"
    description = "swap two adjacent dependent simple statements (shuffled lines)"

    def sites(self, func):
        skip = {"self", "cls", func.self_name}
        for block in func.of_type(cst.IndentedBlock):
            body = block.body
            for i in range(len(body) - 1):
                a, b = body[i], body[i + 1]
                sa, sb = _single(a), _single(b)
                if not (_is_plain_statement(sa) and _is_plain_statement(sb)):
                    continue
                # Independent statements commute: swapping them changes nothing observable.
                if not (_writes(sa, skip) & _paths(sb, skip) or _writes(sb, skip) & _paths(sa, skip)):
                    continue
                new_body = list(body)
                # Blank lines and comments stay where they were; the statements move.
                new_body[i] = b.with_changes(leading_lines=a.leading_lines)
                new_body[i + 1] = a.with_changes(leading_lines=b.leading_lines)
                yield Site(block, block.with_changes(body=new_body),
                           f"swap `{func.code(a)}` and `{func.code(b)}`", a, b)


class _InverseOnly(_Op):
    """Undoes a removal by re-inserting text; has no sites of its own."""

    enumerable = False

    def __init__(self, name: str, family: str, inverse: str, description: str) -> None:
        self.name, self.family, self.inverse, self.description = name, family, inverse, description


def _catalogue() -> dict[str, Operator]:
    ops: list[Operator] = [
        Compare(), Arith(), BoolOp(), AddNot(), RemoveNot(), OffByOne(), Bound(), SwapArgs(),
        WrongName(), DropOperand(), RemoveCondition(), InvertIfElse(), RemoveStatement(),
        RemoveReturn(), RemoveCall(), ReturnValue(), DefaultArg(), Constant(), SwapStatements(),
        _InverseOnly("add_operand", "control", "drop_operand", "restore a dropped and/or operand"),
        _InverseOnly("restore_condition", "control", "remove_condition", "put back a removed if"),
        _InverseOnly("insert_statement", "statement", "remove_statement", "put back a removed statement"),
        _InverseOnly("wrap_call", "statement", "remove_call", "put back a removed call"),
    ]
    return {op.name: op for op in ops}


CATALOGUE: dict[str, Operator] = _catalogue()


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def functions(source: str) -> list[FunctionInfo]:
    """Top-level functions and methods of top-level classes, in source order."""
    prepared = _Prepared(source)
    return [FunctionInfo(qualname, prepared.start_line(fn), prepared.positions[fn].end.line)
            for qualname, fn, _ in prepared.function_defs()]


def iter_sites(prepared: _Prepared, *, lines: Collection[int] | None = None,
               functions: Collection[str] | None = None, operators: Iterable[str] | None = None
               ) -> list[tuple[Operator, FunctionContext, Site]]:
    """Filtered sites in mutation order (source position, then catalogue order)."""
    if operators is None:
        names = [n for n, op in CATALOGUE.items() if op.enumerable]
    else:
        wanted = set(operators)
        unknown = wanted - CATALOGUE.keys()
        if unknown:
            raise OperatorError(f"unknown operator(s): {', '.join(sorted(unknown))}")
        names = [n for n in CATALOGUE if n in wanted and CATALOGUE[n].enumerable]
    order = {n: i for i, n in enumerate(CATALOGUE)}
    line_set = set(lines) if lines is not None else None
    func_set = set(functions) if functions is not None else None
    found = []
    for qualname, fn, class_info in prepared.function_defs():
        if func_set is not None and qualname not in func_set:
            continue
        if line_set is not None and not any(
                prepared.start_line(fn) <= ln <= prepared.positions[fn].end.line for ln in line_set):
            continue  # every site lies inside its function: skip the walk entirely
        ctx = FunctionContext(prepared, fn, qualname, class_info)
        for name in names:
            op = CATALOGUE[name]
            for seq, site in enumerate(op.sites(ctx)):
                start = prepared.positions[site.first or site.old].start
                if line_set is None or start.line in line_set:
                    found.append(((start.line, start.column, order[name], seq), op, ctx, site))
    found.sort(key=lambda item: item[0])
    return [(op, ctx, site) for _, op, ctx, site in found]


def prepare(source: str) -> _Prepared:
    """Parse `source` once for several `mutations(..., prepared=...)` calls on it (the parse
    and position metadata are most of the cost of listing one function's mutations)."""
    return _Prepared(source)


def mutations(source: str, path: str = "", *, lines: Collection[int] | None = None,
              functions: Collection[str] | None = None,
              operators: Iterable[str] | None = None,
              prepared: _Prepared | None = None) -> list[Mutation]:
    """Every mutation the catalogue offers in `source`, filtered, deduplicated, in source order.

    `lines` keeps mutations whose node starts on one of those lines; `functions` keeps those
    qualified names ("Rect.area"); `operators` restricts catalogue names; `prepared` is
    `prepare(source)` reused.  Raises OperatorError when the source does not parse or an
    operator name is unknown.
    """
    if prepared is None:
        prepared = _Prepared(source)
    elif prepared.source != source:
        raise OperatorError("`prepared` was made from another source")
    out: list[Mutation] = []
    seen: set[tuple[int, str, str]] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. invalid escape sequences, seen by ast.parse
        for op, ctx, site in iter_sites(prepared, lines=lines, functions=functions, operators=operators):
            m = prepared.build(op, ctx, site, path)
            if m is not None and (m.start, m.old, m.new) not in seen:
                seen.add((m.start, m.old, m.new))
                out.append(m)
    return out
