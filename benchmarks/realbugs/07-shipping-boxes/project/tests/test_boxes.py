import pytest

from shipping.boxes import boxes_needed, cheapest_packing


def test_exact_fit():
    assert boxes_needed(20, "medium") == 2


def test_part_filled_box():
    assert boxes_needed(21, "medium") == 3


def test_unknown_size():
    with pytest.raises(KeyError):
        boxes_needed(3, "huge")


def test_nothing_to_ship():
    assert cheapest_packing(0) == ("small", 0, 0.0)
