import pytest

from shipping.boxes import boxes_needed, cheapest_packing


def test_small_orders():
    assert boxes_needed(1, "large") == 1
    assert boxes_needed(3, "small") == 1
    assert boxes_needed(5, "small") == 2


def test_negative_quantity():
    with pytest.raises(ValueError):
        boxes_needed(-1, "small")


def test_cheapest_packing():
    assert cheapest_packing(3) == ("small", 1, 2.5)
    assert cheapest_packing(9) == ("medium", 1, 4.0)
    assert cheapest_packing(30) == ("medium", 3, 12.0)
    assert cheapest_packing(40) == ("large", 2, 15.0)
    assert cheapest_packing(48) == ("large", 2, 15.0)
