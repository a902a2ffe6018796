import pytest

from durations import format_duration, parse_duration, split


def test_seconds_only():
    assert format_duration(42) == "42s"


def test_hours():
    assert format_duration(3909) == "1h 05m 09s"


def test_parse():
    assert parse_duration("2m 30s") == 150


def test_negative():
    with pytest.raises(ValueError):
        split(-1)
