"""Bracket checking for a tiny editor plugin: is the text balanced, and where does it go wrong?"""

from __future__ import annotations

from dataclasses import dataclass

PAIRS = {")": "(", "]": "[", "}": "{"}
OPENERS = set(PAIRS.values())


@dataclass(frozen=True)
class Mismatch:
    index: int  # position of the offending character, or len(text) for an unclosed opener
    found: str  # the character there, "" at the end of the text
    expected: str  # the closer that would have been right, "" when none was open


def first_mismatch(text: str) -> Mismatch | None:
    """The first place where brackets stop matching; None when ``text`` is balanced.

    Brackets inside single- or double-quoted strings are ignored.
    """
    stack: list[tuple[str, int]] = []
    quote = ""
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
            continue
        if char in "'\"":
            quote = char
        elif char in OPENERS:
            stack.append((char, index))
        elif char in PAIRS:
            if not stack or stack[-1][0] != PAIRS[char]:
                expected = _closer(stack[-1][0]) if stack else ""
                return Mismatch(index, char, expected)
            stack.pop()
    if stack:
        return Mismatch(len(text), "", _closer(stack[-1][0]))
    return None


def _closer(opener: str) -> str:
    return next(close for close, open_ in PAIRS.items() if open_ == opener)


def is_balanced(text: str) -> bool:
    return first_mismatch(text) is None
