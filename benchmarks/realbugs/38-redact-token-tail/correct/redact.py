"""Scrub secrets from log lines before they leave the machine.

API keys and card numbers keep only their last few characters, which is enough for a person to
tell which key was used without making the log a credential store.
"""

from __future__ import annotations

import re

_KEY = re.compile(r"\b(sk|pk|tok)_[A-Za-z0-9]{8,}\b")
_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")
_ASSIGNMENT = re.compile(r"(?i)\b(password|secret)=(\S+)")


def mask(secret: str, keep: int = 4, fill: str = "*") -> str:
    """``secret`` with all but its last ``keep`` characters replaced by ``fill``."""
    if keep < 1 or len(secret) <= keep:
        return fill * len(secret)
    return fill * (len(secret) - keep) + secret[-keep:]


def _mask_key(match: re.Match[str]) -> str:
    prefix, _, body = match.group(0).partition("_")
    return f"{prefix}_{mask(body)}"


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    return mask(digits)


def scrub(line: str) -> str:
    line = _KEY.sub(_mask_key, line)
    line = _CARD.sub(_mask_card, line)
    return _ASSIGNMENT.sub(lambda m: f"{m.group(1)}=***", line)
