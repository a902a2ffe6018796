from datetime import date, timedelta

from workdays import add_business_days, business_days

MONDAY = date(2024, 3, 4)


def test_single_day():
    assert business_days(MONDAY, MONDAY) == 1
    assert business_days(date(2024, 3, 9), date(2024, 3, 9)) == 0


def test_two_weeks_with_holiday():
    assert business_days(MONDAY, date(2024, 3, 15), holidays={date(2024, 3, 15)}) == 9
    assert business_days(MONDAY, date(2024, 3, 15)) == 10


def test_range_ending_on_friday_and_on_sunday():
    assert business_days(date(2024, 3, 6), date(2024, 3, 8)) == 3
    assert business_days(date(2024, 3, 6), date(2024, 3, 10)) == 3


def test_agrees_with_add_business_days():
    for n in range(1, 15):
        end = add_business_days(MONDAY, n)
        assert business_days(MONDAY + timedelta(days=1), end) == n
