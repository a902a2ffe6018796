import pytest

from durations import format_duration, parse_duration, split


def test_split():
    assert split(0) == (0, 0, 0)
    assert split(59) == (0, 0, 59)
    assert split(3600) == (1, 0, 0)
    assert split(7322) == (2, 2, 2)
    assert split(90061) == (25, 1, 1)


def test_minutes_under_an_hour():
    assert format_duration(61) == "1m 01s"
    assert format_duration(3599) == "59m 59s"


def test_round_trip():
    for seconds in (5, 125, 3600, 5025, 86399):
        assert parse_duration(format_duration(seconds)) == seconds


def test_parse_rejects_garbage():
    with pytest.raises(ValueError):
        parse_duration("soon")
