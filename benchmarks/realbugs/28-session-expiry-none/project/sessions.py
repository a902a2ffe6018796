"""An in-memory session store for a small web app; sessions may expire or live until logout."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Session:
    user: str
    expires_at: float | None = None  # None: until logout ("remember me")
    data: dict[str, Any] = field(default_factory=dict)

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


class SessionStore:
    def __init__(self, lifetime: float = 3600.0, clock: Callable[[], float] = time.time) -> None:
        self._lifetime = lifetime
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    def create(self, user: str, remember: bool = False) -> str:
        token = secrets.token_urlsafe(16)
        expires = None if remember else self._clock() + self._lifetime
        self._sessions[token] = Session(user, expires)
        return token

    def get(self, token: str) -> Session | None:
        """The live session for ``token``; an expired one is dropped."""
        session = self._sessions.get(token)
        if session is None:
            return None
        if session.expired(self._clock()):
            del self._sessions[token]
            return None
        return session

    def logout(self, token: str) -> None:
        self._sessions.pop(token, None)

    def purge(self) -> int:
        """Drop every expired session; how many were dropped."""
        now = self._clock()
        dead = [token for token, session in self._sessions.items() if session.expired(now)]
        for token in dead:
            del self._sessions[token]
        return len(dead)

    def active_users(self) -> set[str]:
        now = self._clock()
        return {s.user for s in self._sessions.values() if not s.expired(now)}
