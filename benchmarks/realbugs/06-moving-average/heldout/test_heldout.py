from smoothing import moving_average


def test_window_of_whole_series():
    assert moving_average([2, 4, 6], 3) == [4.0]


def test_window_of_one_is_identity():
    assert moving_average([3, 1, 4, 1], 1) == [3, 1, 4, 1]


def test_window_larger_than_series():
    assert moving_average([1, 2], 3) == []


def test_longer_series():
    values = [10, 20, 30, 40, 50, 60, 70]
    assert moving_average(values, 3) == [20, 30, 40, 50, 60]
    assert moving_average(values, 4) == [25, 35, 45, 55]
