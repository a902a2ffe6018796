import pytest

from retry import RetryPolicy


class Flaky:
    def __init__(self, failures, error=ConnectionError):
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error("down")
        return "ok"


def test_succeeds_first_time_without_sleeping():
    slept = []
    assert RetryPolicy().call(Flaky(0), sleep=slept.append) == "ok"
    assert slept == []


def test_backoff_delays():
    policy = RetryPolicy(attempts=4, base_delay=1.0)
    assert policy.delays() == [1.0, 2.0, 4.0]


def test_retries_then_succeeds():
    slept = []
    flaky = Flaky(2)
    assert RetryPolicy(attempts=3, base_delay=0.1).call(flaky, sleep=slept.append) == "ok"
    assert flaky.calls == 3
    assert slept == pytest.approx([0.1, 0.2])


def test_does_not_retry_other_errors():
    flaky = Flaky(1, error=KeyError)
    with pytest.raises(KeyError):
        RetryPolicy().call(flaky, sleep=lambda s: None)
    assert flaky.calls == 1


def test_invalid_attempts():
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
