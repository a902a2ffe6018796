import pytest

from smoothing import exponential, moving_average, peaks


def test_moving_average():
    assert moving_average([1, 2, 3, 4, 5], 2) == [1.5, 2.5, 3.5, 4.5]


def test_moving_average_bad_size():
    with pytest.raises(ValueError):
        moving_average([1, 2], 0)


def test_exponential():
    assert exponential([10, 20], 0.5) == [10, 15.0]


def test_peaks():
    assert peaks([1, 3, 2, 5, 4]) == [1, 3]
