"""Resolve RFC 6901 JSON pointers ("/servers/0/host") against parsed JSON documents."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class PointerError(LookupError):
    """The pointer names something the document does not have."""


def parse(pointer: str) -> list[str]:
    """Split a pointer into unescaped reference tokens; "" is the whole document."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/': {pointer!r}")
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _step(node: Any, tokens: list[str], pointer: str) -> Any:
    if not tokens:
        return node
    head, rest = tokens[0], tokens[1:]
    if isinstance(node, dict):
        if head not in node:
            raise PointerError(f"{pointer}: no key {head!r}")
        return _step(node[head], rest, pointer)
    if isinstance(node, list):
        # RFC 6901: array indices are decimal digits without leading zeros
        if not head.isdigit() or (len(head) > 1 and head.startswith("0")):
            raise PointerError(f"{pointer}: {head!r} is not an array index")
        index = int(head)
        if index >= len(node):
            raise PointerError(f"{pointer}: index {index} out of range")
        return _step(node[index], rest, pointer)
    raise PointerError(f"{pointer}: cannot descend into {type(node).__name__}")


def resolve(document: Any, pointer: str, default: Any = _MISSING) -> Any:
    """The value ``pointer`` names in ``document``; ``default`` when given and it is absent."""
    try:
        return _step(document, parse(pointer), pointer)
    except PointerError:
        if default is _MISSING:
            raise
        return default
