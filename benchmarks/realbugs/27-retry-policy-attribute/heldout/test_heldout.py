import pytest

from retry import RetryPolicy


def test_delay_is_capped_by_max_delay():
    policy = RetryPolicy(attempts=6, base_delay=1.0, factor=3.0, max_delay=10.0)
    assert policy.delays() == [1.0, 3.0, 9.0, 10.0, 10.0]


def test_default_cap_is_thirty_seconds():
    assert RetryPolicy(attempts=10, base_delay=1.0).delay(9) == 30.0


def test_zero_max_delay_means_no_waiting():
    assert RetryPolicy(attempts=3, max_delay=0.0).delays() == [0.0, 0.0]


def test_gives_up_with_last_error():
    calls = []

    def always_down():
        calls.append(1)
        raise TimeoutError("still down")

    slept = []
    with pytest.raises(TimeoutError):
        RetryPolicy(attempts=3, base_delay=4.0, max_delay=5.0).call(always_down, sleep=slept.append)
    assert len(calls) == 3
    assert slept == [4.0, 5.0]


def test_negative_max_delay_rejected():
    with pytest.raises(ValueError):
        RetryPolicy(max_delay=-1)
