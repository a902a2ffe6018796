import pytest

from ratelimit.bucket import TokenBucket


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_burst_then_refused():
    bucket = TokenBucket(3, 1.0, clock=FakeClock())
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_refill_over_time():
    clock = FakeClock()
    bucket = TokenBucket(2, 0.5, clock=clock)
    bucket.try_acquire(2)
    clock.now += 2
    assert bucket.try_acquire()
    assert not bucket.try_acquire()


def test_invalid_arguments():
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
