import pytest

from shapes.geometry import Rect
from shapes.report import largest, summary


@pytest.fixture
def shapes():
    return [Rect(3, 1, "strip"), Rect(2, 2, "tile"), Rect(1, 5, "post")]


def test_summary(shapes):
    assert summary(shapes).splitlines() == [
        "strip: 3 x 1, area 3.00, perimeter 8.00",
        "tile: 2 x 2, area 4.00, perimeter 8.00",
        "post: 1 x 5, area 5.00, perimeter 12.00",
        "3 shapes, total area 12.00",
    ]


def test_summary_empty():
    assert summary([]) == "no shapes"


def test_largest(shapes):
    assert largest(shapes).name == "post"


def test_largest_empty():
    with pytest.raises(ValueError):
        largest([])
