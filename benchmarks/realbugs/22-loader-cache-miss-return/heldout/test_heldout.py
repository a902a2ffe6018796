from loadcache import LoaderCache


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_every_miss_returns_the_loaded_value():
    values = {"x": 1, "y": [2, 3], "z": {"k": "v"}}
    cache = LoaderCache(values.__getitem__)
    for key, value in values.items():
        assert cache.get(key) == value
        assert cache.get(key) == value
    assert (cache.hits, cache.misses) == (3, 3)


def test_miss_returns_falsy_values_too():
    cache = LoaderCache(lambda key: 0)
    assert cache.get("n") == 0
    assert cache.get("n") == 0


def test_expired_entry_is_reloaded_and_returned():
    clock = Clock()
    version = {"n": 0}

    def load(key):
        version["n"] += 1
        return f"{key}-v{version['n']}"

    cache = LoaderCache(load, ttl=10, clock=clock)
    assert cache.get("cfg") == "cfg-v1"
    clock.now = 5
    assert cache.get("cfg") == "cfg-v1"
    clock.now = 20
    assert cache.get("cfg") == "cfg-v2"
    assert cache.misses == 2


def test_miss_after_eviction_returns_value():
    cache = LoaderCache(lambda key: key * 2, capacity=1)
    assert cache.get("a") == "aa"
    assert cache.get("b") == "bb"
    assert cache.get("a") == "aa"
    assert len(cache) == 1
