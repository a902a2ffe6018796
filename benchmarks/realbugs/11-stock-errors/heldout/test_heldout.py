import pytest

from warehouse.stock import OutOfStock, Stock, StockError


def test_out_of_stock_details():
    stock = Stock()
    stock.receive("gear", 2)
    with pytest.raises(OutOfStock) as info:
        stock.take("gear", 3)
    assert (info.value.sku, info.value.wanted, info.value.available) == ("gear", 3, 2)
    assert "only 2 available" in str(info.value)


def test_out_of_stock_is_not_a_key_error():
    stock = Stock()
    stock.receive("gear", 1)
    with pytest.raises(StockError) as info:
        stock.take("gear", 2)
    assert not isinstance(info.value, KeyError)


def test_take_everything():
    stock = Stock()
    stock.receive("gear", 2)
    assert stock.take("gear", 2) == 0
