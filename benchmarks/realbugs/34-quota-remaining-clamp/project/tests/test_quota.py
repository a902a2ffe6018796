import pytest

from quota import Quota


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_fresh_client_has_full_quota():
    assert Quota(10).remaining("alice") == 10


def test_consume_counts_down():
    quota = Quota(3)
    assert quota.consume("alice")
    assert quota.consume("alice", cost=2)
    assert quota.remaining("alice") == 0
    assert not quota.consume("alice")


def test_window_resets():
    clock = Clock()
    quota = Quota(2, window=60, clock=clock)
    quota.consume("bob", cost=2)
    clock.now = 61
    assert quota.remaining("bob") == 2


def test_headers_after_going_over_the_limit():
    clock = Clock()
    quota = Quota(5, window=60, clock=clock)
    for _ in range(7):
        quota.consume("eve")
    clock.now = 20.5
    assert quota.headers("eve") == {"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "40"}


def test_limit_must_be_positive():
    with pytest.raises(ValueError):
        Quota(0)
