"""Split plain text (README files, commit messages, emails) into paragraphs and summarise them."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def paragraphs(text: str) -> list[str]:
    """Paragraphs of ``text``: runs of non-blank lines, joined with single spaces."""
    result: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped:
            current.append(stripped)
        elif current:
            result.append(" ".join(current))
            current = []
    if current:
        result.append(" ".join(current))
    return result


def first_sentence(paragraph: str) -> str:
    return _SENTENCE_END.split(paragraph.strip(), maxsplit=1)[0]


def summary(text: str, limit: int = 3) -> list[str]:
    """The first sentence of each of the first ``limit`` paragraphs."""
    return [first_sentence(p) for p in paragraphs(text)[:limit]]


def word_count(text: str) -> int:
    return sum(len(p.split()) for p in paragraphs(text))
