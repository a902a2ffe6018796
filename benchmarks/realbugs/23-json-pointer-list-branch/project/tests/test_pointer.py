import pytest

from pointer import PointerError, parse, resolve

CONFIG = {
    "name": "api",
    "servers": [{"host": "a.example", "port": 80}, {"host": "b.example", "port": 8080}],
    "limits": {"rate": 10},
}


def test_parse_unescapes_tokens():
    assert parse("/a~1b/c~0d") == ["a/b", "c~d"]
    assert parse("") == []


def test_parse_rejects_relative_pointer():
    with pytest.raises(ValueError):
        parse("servers/0")


def test_resolve_nested_keys():
    assert resolve(CONFIG, "/limits/rate") == 10
    assert resolve(CONFIG, "") is CONFIG


def test_resolve_through_array():
    assert resolve(CONFIG, "/servers/1/port") == 8080


def test_missing_key_raises():
    with pytest.raises(PointerError):
        resolve(CONFIG, "/limits/burst")


def test_default_for_missing_key():
    assert resolve(CONFIG, "/limits/burst", default=5) == 5
