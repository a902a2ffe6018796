from sessions import Session, SessionStore


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def test_session_without_expiry_is_never_expired():
    assert not Session("ada").expired(now=0.0)
    assert not Session("ada").expired(now=1e12)


def test_expiry_boundary():
    session = Session("ada", expires_at=10.0)
    assert not session.expired(9.999)
    assert session.expired(10.0)


def test_purge_keeps_remembered_sessions():
    clock = Clock()
    store = SessionStore(lifetime=10, clock=clock)
    keep = store.create("keep", remember=True)
    store.create("short")
    store.create("short2")
    clock.now = 100
    assert store.purge() == 2
    assert store.get(keep).user == "keep"
    assert store.purge() == 0


def test_active_users_mixes_kinds():
    clock = Clock()
    store = SessionStore(lifetime=10, clock=clock)
    store.create("a", remember=True)
    store.create("b")
    assert store.active_users() == {"a", "b"}
    clock.now = 50
    assert store.active_users() == {"a"}
