"""Typed application settings read from environment variables (APP_DEBUG=1, APP_WORKERS=4)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A variable is set to something its setting cannot hold."""


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type = str
    default: Any = None


def parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise SettingsError(f"not a boolean: {text!r}")


def parse_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def coerce(raw: str, kind: type) -> Any:
    """Convert the text of an environment variable to ``kind``."""
    if kind is bool:
        parse_bool(raw)
    if kind is list:
        return parse_list(raw)
    if kind in (int, float):
        try:
            return kind(raw.strip())
        except ValueError:
            raise SettingsError(f"not a{'n' if kind is int else ''} {kind.__name__}: {raw!r}") from None
    return raw


def load(schema: list[Setting], environ: Mapping[str, str] | None = None, prefix: str = "APP_") -> dict[str, Any]:
    """Each setting's value: from ``{prefix}{NAME}`` when set, else its default."""
    environ = os.environ if environ is None else environ
    values = {}
    for setting in schema:
        variable = prefix + setting.name.upper()
        if variable in environ:
            try:
                values[setting.name] = coerce(environ[variable], setting.kind)
            except SettingsError as exc:
                raise SettingsError(f"{variable}: {exc}") from None
        else:
            values[setting.name] = setting.default
    return values
