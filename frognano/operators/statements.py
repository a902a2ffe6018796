"""Operators that edit statements in a block: removed conditions, statements and early
returns, inverted if/else, swapped dependent lines."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from .context import Op, Site
from .nodes import is_str, walk
from .scope import dotted


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


class RemoveCondition(Op):
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


class InvertIfElse(Op):
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


def statement_removal(block: cst.IndentedBlock, index: int, description: str) -> Site:
    stmt = block.body[index]
    if len(block.body) == 1:  # a block cannot be empty
        pass_line = cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=stmt.leading_lines)
        return Site(stmt, pass_line, description)
    return Site(block, _replace_in_block(block, index, []), description, stmt, stmt)


def sole_statement(stmt: cst.CSTNode) -> cst.BaseSmallStatement | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def is_plain_statement(small: cst.CSTNode | None) -> bool:
    """Assignments and expression statements other than docstrings, `...` and bare strings."""
    if isinstance(small, (cst.Assign, cst.AugAssign)):
        return True
    if isinstance(small, cst.AnnAssign):
        return small.value is not None
    if isinstance(small, cst.Expr):
        return not (is_str(small.value) or isinstance(small.value, cst.Ellipsis))
    return False


class RemoveStatement(Op):
    name, family, inverse = "remove_statement", "statement", "insert_statement"
    description = "remove an assignment or expression statement (`pass` if it was alone)"

    def sites(self, func):
        for block in func.of_type(cst.IndentedBlock):
            for i, stmt in enumerate(block.body):
                if is_plain_statement(sole_statement(stmt)):
                    yield statement_removal(block, i, f"remove `{func.code(stmt)}`")


class RemoveReturn(Op):
    name, family, inverse = "remove_return", "statement", "insert_statement"
    description = "remove an early return (any return but a function's last statement)"

    def sites(self, func):
        for block in func.of_type(cst.IndentedBlock):
            owner = func.parent(block)
            for i, stmt in enumerate(block.body):
                if not isinstance(sole_statement(stmt), cst.Return):
                    continue
                if isinstance(owner, cst.FunctionDef) and i == len(block.body) - 1:
                    continue  # the final return is the function's result, not an early exit
                yield statement_removal(block, i, f"remove `{func.code(stmt)}`")


def _paths(node: cst.CSTNode, skip: set) -> set[str]:
    """Names and dotted attribute paths (`self.items`) mentioned under `node`."""
    out = set()
    for n in walk(node):
        if isinstance(n, cst.Name) and n.value not in skip:
            out.add(n.value)
        elif isinstance(n, cst.Attribute):
            path = dotted(n)
            if path:
                out.add(path)
    return out




def _writes(small: cst.CSTNode, skip: set) -> set[str]:
    if isinstance(small, cst.Assign):
        return set().union(*(_paths(t.target, skip) for t in small.targets))
    if isinstance(small, (cst.AugAssign, cst.AnnAssign)):
        return _paths(small.target, skip)
    return _paths(small, skip)  # an expression statement may mutate anything it touches


class SwapStatements(Op):
    name, family, inverse = "swap_statements", "statement", "swap_statements"
    description = "swap two adjacent dependent simple statements (shuffled lines)"

    def sites(self, func):
        skip = {"self", "cls", func.self_name}
        for block in func.of_type(cst.IndentedBlock):
            body = block.body
            for i in range(len(body) - 1):
                a, b = body[i], body[i + 1]
                sa, sb = sole_statement(a), sole_statement(b)
                if not (is_plain_statement(sa) and is_plain_statement(sb)):
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
