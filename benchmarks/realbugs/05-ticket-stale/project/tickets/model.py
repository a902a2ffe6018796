"""Support tickets and the rules the triage job applies to them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass
class Ticket:
    title: str
    created: datetime
    updated: datetime | None = None
    closed: bool = False
    comments: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.updated is None:
            self.updated = self.created

    def comment(self, text: str, when: datetime) -> None:
        self.comments.append(text)
        self.updated = when

    def age(self, now: datetime) -> timedelta:
        return now - self.created

    def is_stale(self, now: datetime, after: timedelta = timedelta(days=14)) -> bool:
        """Open and untouched for longer than ``after``."""
        return not self.closed and now - self.created > after


def stale_tickets(tickets: list[Ticket], now: datetime) -> list[str]:
    return [t.title for t in tickets if t.is_stale(now)]
