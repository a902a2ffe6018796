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
"""

from __future__ import annotations

import difflib
from functools import lru_cache

import libcst as cst

from .context import Op, Site
from .nodes import walk

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


def _defaults(func) -> dict[str, str]:
    """Parameters with a literal default: name -> the default's canonical text."""
    p = func.node.params
    out = {}
    for param in (*p.posonly_params, *p.params, *p.kwonly_params):
        text = _literal_text(param.default)
        if text is not None and param.name.value not in ("self", "cls"):
            out[param.name.value] = text
    return out


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
        p = func.node.params
        spelled = {param.name.value: param.default for param in (*p.posonly_params, *p.params, *p.kwonly_params)
                   if _literal_text(param.default) is not None}
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
