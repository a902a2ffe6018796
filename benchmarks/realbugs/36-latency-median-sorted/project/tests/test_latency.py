import pytest

from latency import median, percentile, summarise


def test_percentile_nearest_rank():
    samples = [15, 20, 35, 40, 50]
    assert percentile(samples, 30) == 20
    assert percentile(samples, 100) == 50


def test_percentile_of_unsorted_samples():
    assert percentile([50, 15, 40, 20, 35], 40) == 20


def test_median_odd_and_even():
    assert median([1, 2, 3]) == 2
    assert median([10, 20, 30, 40]) == 25


def test_median_empty():
    with pytest.raises(ValueError):
        median([])


def test_summary_of_a_run():
    run = [120, 80, 300, 95, 85]
    summary = summarise(run)
    assert summary.count == 5
    assert summary.mean == 136
    assert summary.median == 95
    assert summary.p95 == 300
    assert summary.worst == 300
