"""Operators for two fix shapes of the history corpus that no expression operator reached: a
parameter the function takes but never reads, and an attribute the failing tests found missing.

``use_parameter`` / ``inline_parameter``: ``def args2sh(args, sep=' '): ... ' '.join(...)``
ignores ``sep``; the developers' fix put the parameter where its default was spelled out
(boltons 5df2659).  A parameter nobody reads is a strong hint, so the operator only offers it
where a literal equals that parameter's default.  Its inverse, for synthesis, spells a read of
a parameter as its default.

``fix_attribute`` (inverse ``misspell_attribute``, inverse-only): ``self._excluded.issupserset``
raises ``AttributeError: 'set' object has no attribute 'issupserset'`` (boltons ec1ff9f); the
name quoted by the failing tests' messages is replaced by the closest names the receiver could
have: the members of the builtin types and the attributes and methods the file itself uses.

``make_fstring`` / ``drop_fstring``: `'Field for "{field_name}" ...'` without its ``f``
(marshmallow 8f493e6): a string that spells ``{name}`` of names bound in the function or the
module becomes an f-string, every such part of an implicit concatenation at once.
"""

from __future__ import annotations

import difflib
import string
from functools import lru_cache

import libcst as cst

from .context import Op, Site
from .nodes import walk
from .scope import module_scope

MAX_ATTRIBUTES = 3  # closest names tried per missing attribute
_BUILTIN_TYPES = (str, bytes, list, dict, set, frozenset, tuple, int, float, complex, bytearray)


def _literal_text(node: cst.CSTNode | None) -> str | None:
    """The canonical text of a simple literal (so `' '` and `" "` compare equal), else None."""
    if isinstance(node, (cst.SimpleString, cst.Integer, cst.Float)):
        try:
            return repr(node.evaluated_value)
        except Exception:  # noqa: BLE001 - an odd escape: not worth comparing
            return None
    if isinstance(node, cst.Name) and node.value in ("None", "True", "False"):
        return node.value
    return None


def _literal_defaults(func) -> dict[str, cst.BaseExpression]:
    """Parameters whose default is a simple literal: name -> the default's node."""
    p = func.node.params
    return {param.name.value: param.default for param in (*p.posonly_params, *p.params, *p.kwonly_params)
            if _literal_text(param.default) is not None}


def _defaults(func) -> dict[str, str]:
    """Parameters with a literal default: name -> the default's canonical text."""
    return {name: _literal_text(node) for name, node in _literal_defaults(func).items()}


def _read_names(func) -> set[str]:
    return {n.value for n in func.of_type(cst.Name) if func.is_load(n)}


class UseParameter(Op):
    name, family, inverse = "use_parameter", "name", "inline_parameter"
    description = ("use a parameter the function never reads where its default is spelled out: "
                   "`def f(xs, sep=' '): ' '.join(xs)` -> `sep.join(xs)`")

    def sites(self, func):
        defaults = _defaults(func)
        if not defaults:
            return
        unused = {n: d for n, d in defaults.items() if n not in _read_names(func)}
        if not unused:
            return
        for node in func.nodes:
            text = _literal_text(node)
            if text is None or (text in ("None", "True", "False") and not isinstance(func.parent(node), cst.Arg)):
                continue  # `x is None` is rarely the parameter in disguise; an argument may be
            if isinstance(func.parent(node), (cst.Param, cst.ConcatenatedString)):
                continue
            for pname, default in unused.items():
                if default == text:
                    new = func.fit(node, cst.Name(pname))
                    yield Site(node, new, f"`{func.code(node)}` -> `{pname}` (a parameter never read)")


class InlineParameter(Op):
    name, family, inverse = "inline_parameter", "name", "use_parameter"
    description = "ignore a parameter: a read of it -> its default spelled out (`sep.join(xs)` -> `' '.join(xs)`)"

    def sites(self, func):
        spelled = _literal_defaults(func)
        if not spelled:
            return
        reads = [n for n in func.of_type(cst.Name) if n.value in spelled and func.is_load(n)]
        counts: dict[str, int] = {}
        for n in reads:
            counts[n.value] = counts.get(n.value, 0) + 1
        for n in reads:
            if counts[n.value] != 1:
                continue  # left read elsewhere, use_parameter would not offer it back
            default = spelled[n.value].with_changes(lpar=(), rpar=())
            yield Site(n, func.fit(n, default), f"`{n.value}` -> `{func.code(default)}` (the parameter ignored)")


@lru_cache(maxsize=1)
def _builtin_members() -> frozenset[str]:
    return frozenset(m for t in _BUILTIN_TYPES for m in dir(t) if not m.startswith("__"))


def _module_attributes(module: cst.Module) -> set[str]:
    """Attribute names the file uses (`x.name`) and the methods and functions it defines."""
    names: set[str] = set()
    for node in walk(module):
        if isinstance(node, cst.Attribute):
            names.add(node.attr.value)
        elif isinstance(node, cst.FunctionDef):
            names.add(node.name.value)
    return names


class FixAttribute(Op):
    name, family, inverse = "fix_attribute", "name", "misspell_attribute"
    description = ("replace an attribute the failing tests found missing (`'set' object has no attribute "
                   "'issupserset'`) by the closest a builtin type has or the file uses")

    def sites(self, func):
        missing = {w for w in func.ingredients if w.isidentifier()}
        if not missing:
            return
        known: set[str] | None = None
        for node in func.of_type(cst.Attribute):
            attr = node.attr.value
            if attr not in missing:
                continue
            if known is None:
                known = set(_builtin_members()) | _module_attributes(func.module)
            choices = difflib.get_close_matches(attr, sorted(known - {attr}), n=MAX_ATTRIBUTES, cutoff=0.75)
            for other in choices:
                new = node.with_changes(attr=cst.Name(other))
                yield Site(node, new, f"`.{attr}` -> `.{other}` (the attribute the tests found missing)")


def _placeholders(text: str) -> list[str]:
    """The names a str.format-style text would read (`{field_name}`, `{obj.__name__}`, `{x!r}`),
    or [] when it has none or is no valid format string."""
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError:
        return []
    return [field for _, field, _, _ in parts if field]


class MakeFString(Op):
    name, family, inverse = "make_fstring", "literal", "drop_fstring"
    description = ("a message that spells `{name}` of a name in scope but is no f-string: "
                   "`'no {field}'` -> `f'no {field}'` (every part of an implicit concatenation)")

    def sites(self, func):
        bound = set(func.locals) | {func.self_name or "self"} | set(module_scope(func.prepared).bound)
        for node in func.nodes:
            if isinstance(func.parent(node), (cst.ConcatenatedString, cst.Attribute)):
                continue  # a part (the whole concatenation is the site), or `'{x}'.format(x=...)`
            if isinstance(node, cst.ConcatenatedString):
                parts = list(_flatten(node))
                if not all(isinstance(p, (cst.SimpleString, cst.FormattedString)) for p in parts):
                    continue
            elif isinstance(node, cst.SimpleString):
                parts = [node]
            else:
                continue
            changed, new_parts = False, []
            for part in parts:
                if isinstance(part, cst.SimpleString) and self._formats(part, bound):
                    new_parts.append(_as_fstring(part))
                    changed = True
                else:
                    new_parts.append(part)
            if not changed:
                continue
            new = _rebuild(node, new_parts)
            if new is not None:
                yield Site(node, new, f"`{func.code(node, 32)}` -> an f-string")

    @staticmethod
    def _formats(part: cst.SimpleString, bound: set[str]) -> bool:
        prefix = part.prefix.lower()
        if "b" in prefix or "f" in prefix:
            return False
        try:
            text = part.evaluated_value
        except Exception:  # noqa: BLE001
            return False
        fields = _placeholders(text) if isinstance(text, str) else []
        heads = [f.split(".", 1)[0].split("[", 1)[0].split("!", 1)[0].split(":", 1)[0] for f in fields]
        return bool(heads) and all(h.isidentifier() and h in bound for h in heads)


class DropFString(Op):
    name, family, inverse = "drop_fstring", "literal", "make_fstring"
    description = "forget the f of an f-string that only reads names: `f'no {field}'` -> `'no {field}'`"

    def sites(self, func):
        for node in func.of_type(cst.FormattedString):
            if not all(isinstance(p, cst.FormattedStringText)
                       or (isinstance(p, cst.FormattedStringExpression) and isinstance(p.expression, (cst.Name, cst.Attribute))
                           and p.format_spec is None)
                       for p in node.parts):
                continue
            if not any(isinstance(p, cst.FormattedStringExpression) for p in node.parts):
                continue
            text = func.module.code_for_node(node)
            prefix = node.start[:-1] if node.start else ""
            plain = prefix.replace("f", "").replace("F", "")
            try:
                new = cst.parse_expression(plain + text[len(prefix):])
            except cst.ParserSyntaxError:
                continue
            if not isinstance(new, cst.SimpleString):
                continue
            yield Site(node, new, f"`{func.code(node, 32)}` -> a plain string (its f dropped)")


def _flatten(node: cst.ConcatenatedString):
    for side in (node.left, node.right):
        if isinstance(side, cst.ConcatenatedString):
            yield from _flatten(side)
        else:
            yield side


def _as_fstring(part: cst.SimpleString) -> cst.BaseExpression:
    return cst.parse_expression("f" + part.value)


def _rebuild(node: cst.CSTNode, parts: list[cst.CSTNode]) -> cst.CSTNode | None:
    """``node`` (a string or an implicit concatenation) with its parts replaced in order."""
    if not isinstance(node, cst.ConcatenatedString):
        return parts[0]
    it = iter(parts)

    def walk_(n: cst.ConcatenatedString) -> cst.ConcatenatedString:
        left = walk_(n.left) if isinstance(n.left, cst.ConcatenatedString) else next(it)
        right = walk_(n.right) if isinstance(n.right, cst.ConcatenatedString) else next(it)
        return n.with_changes(left=left, right=right)

    return walk_(node)
