import pytest

from warehouse.stock import OutOfStock, Stock, UnknownItem


def _stock():
    stock = Stock()
    stock.receive("bolt", 10)
    stock.receive("nut", 4)
    return stock


def test_take():
    stock = _stock()
    assert stock.take("bolt", 3) == 7


def test_take_unknown():
    with pytest.raises(UnknownItem):
        _stock().take("screw", 1)


def test_take_too_many():
    stock = _stock()
    with pytest.raises(OutOfStock):
        stock.take("nut", 5)
    assert stock.available("nut") == 4


def test_order_is_all_or_nothing():
    stock = _stock()
    with pytest.raises(OutOfStock):
        stock.take_order({"bolt": 2, "nut": 9})
    assert stock.levels == {"bolt": 10, "nut": 4}
