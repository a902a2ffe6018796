"""A tiny parser for "key = value" files with [sections] and # comments."""

from __future__ import annotations


class ParseError(Exception):
    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


def parse(text: str) -> dict[str, dict[str, str]]:
    """{section: {key: value}}; keys before any section go to the "" section."""
    result: dict[str, dict[str, str]] = {"": {}}
    section = ""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            if not section:
                raise ParseError(lineno, "empty section name")
            result.setdefault(section, {})
            continue
        try:
            key, value = line.split("=", 1)
        except ValueError:
            raise ParseError(lineno, f"expected key = value, got {line!r}") from None
        key = key.strip()
        if not key:
            raise ParseError(lineno, "empty key")
        result[section][key] = value.strip()
    return result
