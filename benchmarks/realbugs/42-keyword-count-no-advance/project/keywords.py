"""Keyword statistics for an SEO checker: how often a page uses a phrase, and its top words."""

from __future__ import annotations

import re
from collections import Counter

_WORD = re.compile(r"[a-z0-9']+")
STOPWORDS = frozenset("a an and are as at be by for from in is it of on or that the this to with".split())


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "'"


def count_phrase(text: str, phrase: str) -> int:
    """Whole-word, case-insensitive, non-overlapping occurrences of ``phrase`` in ``text``."""
    haystack, needle = text.lower(), phrase.lower().strip()
    if not needle:
        raise ValueError("empty phrase")
    total = 0
    index = haystack.find(needle)
    while index != -1:
        end = index + len(needle)
        before_ok = index == 0 or not _is_word_char(haystack[index - 1])
        after_ok = end == len(haystack) or not _is_word_char(haystack[end])
        if before_ok and after_ok:
            total += 1
            index = haystack.find(needle, index)
        else:
            index = haystack.find(needle, index + 1)
    return total


def density(text: str, phrase: str) -> float:
    """Share of the page's words taken up by ``phrase`` (0.0 for an empty page)."""
    total_words = len(words(text))
    if total_words == 0:
        return 0.0
    return count_phrase(text, phrase) * len(words(phrase)) / total_words


def top_words(text: str, n: int = 5) -> list[tuple[str, int]]:
    counts = Counter(word for word in words(text) if word not in STOPWORDS)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
