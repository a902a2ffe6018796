import pytest

from inventory.ledger import Ledger


@pytest.fixture
def ledger():
    """Bolts and nuts over one week (days 1-7)."""
    book = Ledger()
    book.receive(1, "bolt", 10)
    book.receive(1, "nut", 5)
    book.ship(2, "bolt", 4)
    book.receive(4, "bolt", 6)
    book.ship(5, "nut", 5)
    book.ship(7, "bolt", 9)
    return book
