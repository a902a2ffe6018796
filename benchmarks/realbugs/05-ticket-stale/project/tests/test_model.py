from datetime import datetime, timedelta

from tickets.model import Ticket

NOW = datetime(2024, 5, 31, 12, 0)


def test_new_ticket_updated_is_created():
    t = Ticket("printer", NOW)
    assert t.updated == NOW
    assert t.age(NOW + timedelta(days=2)) == timedelta(days=2)


def test_old_untouched_ticket_is_stale():
    t = Ticket("vpn", NOW - timedelta(days=30))
    assert t.is_stale(NOW)


def test_recent_comment_keeps_ticket_fresh():
    t = Ticket("mail", NOW - timedelta(days=30))
    t.comment("still broken", NOW - timedelta(days=1))
    assert not t.is_stale(NOW)
