from quota import Quota


def test_remaining_never_negative():
    quota = Quota(2)
    for expected in (1, 0, 0, 0):
        quota.consume("c")
        assert quota.remaining("c") == expected


def test_big_cost_over_limit():
    quota = Quota(10)
    assert not quota.consume("c", cost=25)
    assert quota.remaining("c") == 0
    assert quota.headers("c")["X-RateLimit-Remaining"] == "0"


def test_clients_are_independent():
    quota = Quota(4)
    quota.consume("a", cost=3)
    assert quota.remaining("a") == 1
    assert quota.remaining("b") == 4


def test_partial_use_headers():
    quota = Quota(100)
    quota.consume("x", cost=30)
    assert quota.headers("x")["X-RateLimit-Remaining"] == "70"
