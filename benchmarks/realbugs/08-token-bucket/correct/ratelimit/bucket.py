"""A token-bucket rate limiter with an injectable clock."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """Allows bursts of up to ``capacity`` calls, refilled at ``rate`` tokens per second."""

    def __init__(self, capacity: float, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if capacity <= 0 or rate <= 0:
            raise ValueError("capacity and rate must be positive")
        self.capacity = capacity
        self.rate = rate
        self.clock = clock
        self.tokens = capacity
        self.stamp = clock()

    def _refill(self) -> None:
        now = self.clock()
        elapsed = max(0.0, now - self.stamp)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.stamp = now

    def try_acquire(self, cost: float = 1.0) -> bool:
        self._refill()
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False

    def wait_time(self, cost: float = 1.0) -> float:
        """Seconds until ``cost`` tokens are available (0 when they are now)."""
        self._refill()
        missing = cost - self.tokens
        return max(0.0, missing / self.rate)
