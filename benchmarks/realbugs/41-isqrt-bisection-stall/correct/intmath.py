"""Exact integer helpers for a puzzle solver (no floats: the numbers get too big for them)."""

from __future__ import annotations

from functools import reduce
from math import gcd


def isqrt(n: int) -> int:
    """The largest r with r * r <= n, by bisection on the answer."""
    if n < 0:
        raise ValueError("square root of a negative number")
    lo, hi = 0, n
    while lo < hi:
        # round the midpoint up: with lo = mid below, rounding down could leave lo where it was
        mid = (lo + hi + 1) // 2
        if mid * mid <= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


def is_square(n: int) -> bool:
    return n >= 0 and isqrt(n) ** 2 == n


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending."""
    if n < 1:
        raise ValueError("divisors of a non-positive number")
    small, large = [], []
    for d in range(1, isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


def gcd_all(numbers: list[int]) -> int:
    return reduce(gcd, numbers, 0)


def lcm_all(numbers: list[int]) -> int:
    return reduce(lambda a, b: a * b // gcd(a, b), numbers, 1)
