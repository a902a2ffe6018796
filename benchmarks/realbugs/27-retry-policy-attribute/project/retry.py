"""Retry a flaky call (an HTTP request, a lock acquisition) with capped exponential backoff."""

from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class RetryPolicy:
    def __init__(self, attempts: int = 3, base_delay: float = 0.5, factor: float = 2.0,
                 max_delay: float = 30.0, retry_on: tuple[type[BaseException], ...] = (OSError,)) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays cannot be negative")
        self.attempts = attempts
        self.base_delay = base_delay
        self.factor = factor
        self.retry_on = retry_on

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return min(self.max_delay, self.base_delay * self.factor ** (attempt - 1))

    def delays(self) -> list[float]:
        return [self.delay(n) for n in range(1, self.attempts)]

    def call(self, func: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
        """``func()``, retried on ``retry_on`` errors; the last error propagates."""
        for attempt in range(1, self.attempts + 1):
            try:
                return func()
            except self.retry_on as exc:
                if attempt == self.attempts:
                    raise
                wait = self.delay(attempt)
                log.info("attempt %d failed (%s); retrying in %.2fs", attempt, exc, wait)
                sleep(wait)
        raise AssertionError("unreachable")
