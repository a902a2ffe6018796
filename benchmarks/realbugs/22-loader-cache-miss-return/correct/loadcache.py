"""A small read-through cache in front of a slow loader (a database, a remote config service)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LoaderCache(Generic[K, V]):
    """Caches ``loader(key)`` results, evicting the least recently used entry past ``capacity``.

    Entries older than ``ttl`` seconds are reloaded; ``clock`` is injectable for tests.
    """

    def __init__(self, loader: Callable[[K], V], capacity: int = 128, ttl: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._loader = loader
        self._capacity = capacity
        self._ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def _fresh(self, stored_at: float) -> bool:
        return self._ttl is None or self._clock() - stored_at < self._ttl

    def get(self, key: K) -> V:
        entry = self._entries.get(key)
        if entry is not None and self._fresh(entry[0]):
            self.hits += 1
            self._entries.move_to_end(key)
            return entry[1]
        self.misses += 1
        value = self._loader(key)
        self._entries[key] = (self._clock(), value)
        self._entries.move_to_end(key)
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return value

    def invalidate(self, key: K) -> bool:
        """Forget ``key``; True when it was cached."""
        return self._entries.pop(key, None) is not None

    def clear(self) -> None:
        self._entries.clear()
