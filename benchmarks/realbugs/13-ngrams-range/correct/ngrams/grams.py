"""Character n-grams and a similarity measure built on them (for fuzzy name matching)."""

from __future__ import annotations

from collections import Counter


def ngrams(text: str, n: int = 3) -> list[str]:
    """Every run of ``n`` consecutive characters, in order."""
    if n < 1:
        raise ValueError("n must be positive")
    return [text[i:i + n] for i in range(len(text) - n + 1)]


def profile(text: str, n: int = 3) -> Counter:
    padded = f" {text.lower()} "
    return Counter(ngrams(padded, n))


def similarity(a: str, b: str, n: int = 3) -> float:
    """Dice coefficient of the n-gram profiles: 1.0 for equal strings, 0.0 for nothing shared."""
    pa, pb = profile(a, n), profile(b, n)
    total = sum(pa.values()) + sum(pb.values())
    if total == 0:
        return 1.0
    shared = sum((pa & pb).values())
    return 2 * shared / total


def best_match(name: str, candidates: list[str], n: int = 3) -> str | None:
    scored = [(similarity(name, c, n), c) for c in candidates]
    return max(scored)[1] if scored else None
