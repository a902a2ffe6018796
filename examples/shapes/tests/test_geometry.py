import pytest

from shapes.geometry import Rect


def test_area():
    assert Rect(2, 3).area() == 6


@pytest.mark.parametrize("width, height, area", [(1, 1, 1), (4, 0.5, 2), (0, 7, 0)])
def test_area_parametrized(width, height, area):
    assert Rect(width, height).area() == area


def test_perimeter():
    assert Rect(2, 3).perimeter() == 10


def test_scale():
    big = Rect(2, 3, "door").scale(2)
    assert (big.width, big.height, big.name) == (4, 6, "door")


def test_is_square():
    assert Rect(2, 2).is_square()
    assert not Rect(2, 3).is_square()


def test_negative_size():
    with pytest.raises(ValueError, match="door"):
        Rect(-1, 2, "door")
