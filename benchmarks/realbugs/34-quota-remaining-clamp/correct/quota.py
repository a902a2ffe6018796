"""Per-client API quotas over fixed windows, with the numbers sent back in X-RateLimit headers."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Window:
    started: float
    used: int = 0


class Quota:
    def __init__(self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.window = window
        self._clock = clock
        self._windows: dict[str, Window] = {}

    def _current(self, client: str) -> Window:
        now = self._clock()
        window = self._windows.get(client)
        if window is None or now - window.started >= self.window:
            window = self._windows[client] = Window(started=now)
        return window

    def consume(self, client: str, cost: int = 1) -> bool:
        """Record a request; False when it goes over the limit (it still counts, as abuse does)."""
        window = self._current(client)
        window.used += cost
        return window.used <= self.limit

    def remaining(self, client: str) -> int:
        return max(0, self.limit - self._current(client).used)

    def reset_in(self, client: str) -> float:
        window = self._current(client)
        return max(0.0, window.started + self.window - self._clock())

    def headers(self, client: str) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining(client)),
            "X-RateLimit-Reset": str(int(self.reset_in(client) + 0.999)),
        }
