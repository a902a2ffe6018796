from datetime import date

from invoices.due import Invoice, days_until_due, reminders, status

TODAY = date(2024, 3, 10)


def test_overdue():
    invoice = Invoice("B-1", 80.0, date(2024, 3, 1))
    assert days_until_due(invoice, TODAY) == -9
    assert status(invoice, TODAY) == "overdue"


def test_due_today_is_due_soon():
    assert status(Invoice("B-2", 1.0, TODAY), TODAY) == "due soon"


def test_reminders_most_overdue_first():
    invoices = [
        Invoice("C-1", 10.0, date(2024, 3, 12)),
        Invoice("C-2", 20.0, date(2024, 2, 20)),
        Invoice("C-3", 30.0, date(2024, 5, 1)),
        Invoice("C-4", 40.0, date(2024, 3, 9)),
    ]
    assert reminders(invoices, TODAY) == [
        "C-2: overdue (20.00)", "C-4: overdue (40.00)", "C-1: due soon (10.00)"]
