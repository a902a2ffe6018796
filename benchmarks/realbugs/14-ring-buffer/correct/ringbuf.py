"""A fixed-size ring buffer that keeps the most recent items (e.g. the last N log lines)."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class RingBuffer(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items: list[T | None] = [None] * capacity
        self._next = 0  # where the next item is written
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, item: T) -> None:
        self._items[self._next] = item
        self._next = (self._next + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def items(self) -> list[T]:
        """Oldest first."""
        start = (self._next - self._size) % self.capacity
        return [self._items[(start + i) % self.capacity] for i in range(self._size)]  # type: ignore[misc]

    def last(self) -> T:
        if not self._size:
            raise IndexError("empty ring buffer")
        return self._items[(self._next - 1) % self.capacity]  # type: ignore[return-value]

    def clear(self) -> None:
        self._items = [None] * self.capacity
        self._next = self._size = 0
