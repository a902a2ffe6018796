import pytest

from timesheet.hours import hours_per_day, overtime, parse_clock, shift_minutes


def test_parse_clock():
    assert parse_clock("09:30") == 570
    assert parse_clock("00:00") == 0


def test_parse_clock_rejects_garbage():
    with pytest.raises(ValueError):
        parse_clock("25:00")
    with pytest.raises(ValueError):
        parse_clock("930")


def test_shift_minutes():
    assert shift_minutes({"day": "mon", "start": "09:00", "end": "17:30"}) == 510


def test_hours_per_day_empty():
    assert hours_per_day([]) == {}


def test_overtime_none_on_short_days():
    entries = [{"day": "mon", "start": "09:00", "end": "12:00"}]
    assert overtime(entries) == 0.0
