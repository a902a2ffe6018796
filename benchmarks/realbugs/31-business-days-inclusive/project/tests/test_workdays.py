from datetime import date

import pytest

from workdays import add_business_days, business_days, is_workday

MONDAY = date(2024, 3, 4)


def test_is_workday():
    assert is_workday(MONDAY)
    assert not is_workday(date(2024, 3, 9))
    assert not is_workday(MONDAY, holidays={MONDAY})


def test_full_working_week():
    assert business_days(MONDAY, date(2024, 3, 8)) == 5


def test_weekend_only():
    assert business_days(date(2024, 3, 9), date(2024, 3, 10)) == 0


def test_end_before_start():
    assert business_days(date(2024, 3, 8), MONDAY) == 0


def test_add_business_days_skips_weekend():
    assert add_business_days(date(2024, 3, 8), 1) == date(2024, 3, 11)
    with pytest.raises(ValueError):
        add_business_days(MONDAY, -1)
