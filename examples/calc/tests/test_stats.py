import pytest

from calc.stats import clamp, is_adult, mean


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_edges():
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10


@pytest.mark.parametrize("age, adult", [(17, False), (18, True), (40, True)])
def test_is_adult(age, adult):
    assert is_adult(age) is adult


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])
