"""Typed settings read from environment variables, with clear errors."""

from __future__ import annotations

import os
from collections.abc import Mapping


class ConfigError(Exception):
    """A setting is missing or malformed; the message names the variable."""


class Settings:
    def __init__(self, environ: Mapping[str, str] | None = None, prefix: str = "APP_") -> None:
        self.environ = os.environ if environ is None else environ
        self.prefix = prefix

    def _raw(self, name: str) -> str | None:
        return self.environ.get(self.prefix + name.upper())

    def get_str(self, name: str, default: str | None = None) -> str:
        raw = self._raw(name)
        if raw is None:
            if default is None:
                raise ConfigError(f"{self.prefix}{name.upper()} is not set")
            return default
        return raw

    def get_int(self, name: str, default: int | None = None) -> int:
        raw = self._raw(name)
        if raw is None:
            if default is None:
                raise ConfigError(f"{self.prefix}{name.upper()} is not set")
            return default
        try:
            return int(raw.strip())
        except TypeError:
            raise ConfigError(f"{self.prefix}{name.upper()} must be an integer, not {raw!r}") from None

    def get_bool(self, name: str, default: bool = False) -> bool:
        raw = self._raw(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{self.prefix}{name.upper()} must be a boolean, not {raw!r}")
