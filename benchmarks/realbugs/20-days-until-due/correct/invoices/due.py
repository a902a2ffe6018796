"""Payment reminders for invoices."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass
class Invoice:
    number: str
    amount: float
    due: date
    paid: bool = False


def days_until_due(invoice: Invoice, today: date) -> int:
    """Negative once the invoice is overdue."""
    return (invoice.due - today).days


def status(invoice: Invoice, today: date, warn_days: int = 7) -> str:
    if invoice.paid:
        return "paid"
    left = days_until_due(invoice, today)
    if left < 0:
        return "overdue"
    if left <= warn_days:
        return "due soon"
    return "open"


def reminders(invoices: list[Invoice], today: date) -> list[str]:
    """One line per invoice that needs a reminder, the most overdue first."""
    pending = [i for i in invoices if status(i, today) in ("overdue", "due soon")]
    pending.sort(key=lambda i: days_until_due(i, today))
    return [f"{i.number}: {status(i, today)} ({i.amount:.2f})" for i in pending]
