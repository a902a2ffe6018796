"""Layered configuration: defaults, then a config file, then command-line overrides."""

from __future__ import annotations

from typing import Any, Mapping


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: ``override`` on top of ``base``; nested dicts merge, everything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(merged[key], dict) and isinstance(value, dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_override(text: str) -> dict[str, Any]:
    """``"db.pool.size=5"`` -> ``{"db": {"pool": {"size": 5}}}`` (ints and booleans recognised)."""
    path, sep, raw = text.partition("=")
    if not sep or not path:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    value: Any = raw
    if raw.lstrip("-").isdigit():
        value = int(raw)
    elif raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    for part in reversed(path.split(".")):
        value = {part: value}
    return value


def layered(*layers: Mapping[str, Any], overrides: list[str] = ()) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for layer in layers:
        result = deep_merge(result, layer)
    for text in overrides:
        result = deep_merge(result, parse_override(text))
    return result
