from datetime import date

from invoices.due import Invoice, days_until_due, status

TODAY = date(2024, 3, 10)


def test_days_until_due():
    assert days_until_due(Invoice("A-1", 100.0, date(2024, 3, 15)), TODAY) == 5


def test_paid_invoice():
    assert status(Invoice("A-2", 50.0, date(2024, 1, 1), paid=True), TODAY) == "paid"


def test_far_future_is_open():
    assert status(Invoice("A-3", 10.0, date(2024, 6, 1)), TODAY) == "open"
