import pytest

from inventory.ledger import Ledger, OutOfStock


def test_level(ledger):
    assert ledger.level("bolt") == 3
    assert ledger.level("nut") == 0
    assert ledger.level("washer") == 0


def test_skus(ledger):
    assert ledger.skus() == ["bolt", "nut"]


def test_receive_rejects_non_positive():
    book = Ledger()
    with pytest.raises(ValueError):
        book.receive(1, "bolt", 0)


def test_ship_more_than_stock(ledger):
    with pytest.raises(OutOfStock):
        ledger.ship(8, "bolt", 4)
    assert ledger.level("bolt") == 3


def test_ship_everything(ledger):
    ledger.ship(8, "bolt", 3)
    assert ledger.level("bolt") == 0


def test_daily_levels(ledger):
    assert ledger.daily_levels("bolt", 1, 7) == [10, 6, 6, 12, 12, 12, 3]


def test_daily_levels_mid_span(ledger):
    # Stock from before the span is carried in; a one-day span has one level.
    assert ledger.daily_levels("nut", 3, 3) == [5]
    assert ledger.daily_levels("bolt", 2, 4) == [6, 6, 12]


def test_days_below(ledger):
    assert ledger.days_below("bolt", 7, 1, 7) == [2, 3, 7]
    assert ledger.days_below("nut", 1, 4, 6) == [5, 6]


def test_daily_levels_empty_span(ledger):
    assert ledger.daily_levels("bolt", 5, 4) == []
