import pytest

from layered import deep_merge, layered, parse_override

DEFAULTS = {"debug": False, "db": {"host": "localhost", "pool": {"size": 2, "timeout": 30}}}


def test_scalar_replaced():
    assert deep_merge({"debug": False}, {"debug": True}) == {"debug": True}


def test_nested_values_merge():
    merged = deep_merge(DEFAULTS, {"db": {"pool": {"size": 10}}})
    assert merged["db"] == {"host": "localhost", "pool": {"size": 10, "timeout": 30}}


def test_base_not_mutated():
    deep_merge(DEFAULTS, {"db": {"host": "db.internal"}})
    assert DEFAULTS["db"]["host"] == "localhost"


def test_parse_override():
    assert parse_override("db.pool.size=5") == {"db": {"pool": {"size": 5}}}
    with pytest.raises(ValueError):
        parse_override("db.pool.size")


def test_layers_and_overrides():
    config = layered(DEFAULTS, {"db": {"host": "db.internal"}}, overrides=["cache.enabled=true"])
    assert config["db"]["host"] == "db.internal"
    assert config["cache"] == {"enabled": True}
