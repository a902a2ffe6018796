from datetime import datetime, timedelta

from tickets.model import Ticket, stale_tickets

NOW = datetime(2024, 5, 31, 12, 0)


def test_closed_tickets_are_never_stale():
    t = Ticket("old", NOW - timedelta(days=100), closed=True)
    assert not t.is_stale(NOW)


def test_stale_tickets_list():
    fresh = Ticket("fresh", NOW - timedelta(days=3))
    revived = Ticket("revived", NOW - timedelta(days=60))
    revived.comment("ping", NOW - timedelta(days=2))
    forgotten = Ticket("forgotten", NOW - timedelta(days=40))
    forgotten.comment("any news?", NOW - timedelta(days=20))
    assert stale_tickets([fresh, revived, forgotten], NOW) == ["forgotten"]


def test_custom_threshold():
    t = Ticket("x", NOW - timedelta(days=10))
    t.comment("update", NOW - timedelta(days=5))
    assert t.is_stale(NOW, after=timedelta(days=4))
    assert not t.is_stale(NOW, after=timedelta(days=6))
