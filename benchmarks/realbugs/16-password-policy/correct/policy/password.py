"""Password policy checks that report every rule a password breaks."""

from __future__ import annotations

import string
from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    min_length: int = 10
    need_digit: bool = True
    need_symbol: bool = False
    forbidden: frozenset[str] = frozenset({"password", "letmein", "qwerty"})

    def problems(self, password: str) -> list[str]:
        found = []
        if len(password) < self.min_length:
            found.append(f"shorter than {self.min_length} characters")
        if self.need_digit and not any(c.isdigit() for c in password):
            found.append("no digit")
        if self.need_symbol and not any(c in string.punctuation for c in password):
            found.append("no symbol")
        if password.lower() in self.forbidden:
            found.append("too common")
        return found

    def accepts(self, password: str) -> bool:
        return not self.problems(password)


def strength(password: str) -> int:
    """0-4: one point per character class used, one more for 14 characters or more."""
    classes = [string.ascii_lowercase, string.ascii_uppercase, string.digits, string.punctuation]
    used = sum(any(c in cls for c in password) for cls in classes)
    return min(4, used + (len(password) >= 14)) if password else 0
