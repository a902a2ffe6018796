from timesheet.hours import hours_per_day, overtime, shift_minutes


def test_night_shift_crosses_midnight():
    assert shift_minutes({"day": "fri", "start": "22:00", "end": "06:00"}) == 480


def test_hours_per_day_sums_shifts():
    entries = [
        {"day": "tue", "start": "08:00", "end": "12:00"},
        {"day": "mon", "start": "09:15", "end": "17:45"},
        {"day": "tue", "start": "13:00", "end": "17:30"},
    ]
    assert hours_per_day(entries) == {"mon": 8.5, "tue": 8.5}


def test_overtime_counts_each_day():
    entries = [
        {"day": "mon", "start": "07:00", "end": "17:00"},
        {"day": "tue", "start": "09:00", "end": "16:00"},
        {"day": "wed", "start": "08:00", "end": "17:30"},
    ]
    assert overtime(entries) == 3.5
    assert overtime(entries, daily_limit=9) == 1.5
