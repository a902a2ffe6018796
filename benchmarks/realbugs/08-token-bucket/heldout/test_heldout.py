from ratelimit.bucket import TokenBucket


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_idle_time_never_exceeds_capacity():
    clock = FakeClock()
    bucket = TokenBucket(5, 10.0, clock=clock)
    clock.now += 60
    assert [bucket.try_acquire() for _ in range(6)] == [True] * 5 + [False]


def test_wait_time():
    clock = FakeClock()
    bucket = TokenBucket(4, 2.0, clock=clock)
    assert bucket.wait_time() == 0.0
    bucket.try_acquire(4)
    assert bucket.wait_time(3) == 1.5
    clock.now += 1
    assert bucket.wait_time(3) == 0.5


def test_partial_refill_is_capped():
    clock = FakeClock()
    bucket = TokenBucket(2, 1.0, clock=clock)
    bucket.try_acquire()
    clock.now += 5
    assert bucket.try_acquire(2)
    assert not bucket.try_acquire(0.5)
