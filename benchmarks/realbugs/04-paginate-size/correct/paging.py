"""Splitting a result list into pages for an API response."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Page(Generic[T]):
    items: list[T]
    number: int
    pages: int

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def paginate(items: list[T], number: int, size: int = 10) -> Page[T]:
    """Page ``number`` (1-based) of ``items``, ``size`` items per page."""
    if size < 1:
        raise ValueError("page size must be positive")
    pages = max(1, math.ceil(len(items) / size))
    if not 1 <= number <= pages:
        raise IndexError(f"page {number} out of range 1..{pages}")
    start = (number - 1) * size
    return Page(items[start:start + size], number, pages)
