from latency import median, summarise


def test_median_of_unsorted_odd():
    assert median([9, 1, 5]) == 5
    assert median([3, 3, 1, 2, 100]) == 3


def test_median_of_unsorted_even():
    assert median([40, 10, 30, 20]) == 25
    assert median([2.5, 0.5]) == 1.5


def test_median_single_and_reversed():
    assert median([7]) == 7
    assert median(list(range(100, 0, -1))) == 50.5


def test_median_does_not_reorder_input():
    samples = [3, 1, 2]
    median(samples)
    assert samples == [3, 1, 2]


def test_summary_median_of_spiky_run():
    assert summarise([500, 10, 11, 12, 13, 14, 900]).median == 13
