from sessions import Session, SessionStore


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def test_session_lives_until_lifetime():
    clock = Clock()
    store = SessionStore(lifetime=60, clock=clock)
    token = store.create("ada")
    clock.now += 59
    assert store.get(token).user == "ada"
    clock.now += 1
    assert store.get(token) is None


def test_unknown_token():
    assert SessionStore().get("nope") is None


def test_logout():
    store = SessionStore()
    token = store.create("ada")
    store.logout(token)
    assert store.get(token) is None


def test_remembered_session_never_expires():
    clock = Clock()
    store = SessionStore(lifetime=60, clock=clock)
    token = store.create("grace", remember=True)
    clock.now += 10**6
    assert store.get(token).user == "grace"


def test_expired_session():
    assert Session("ada", expires_at=5.0).expired(now=6.0)
