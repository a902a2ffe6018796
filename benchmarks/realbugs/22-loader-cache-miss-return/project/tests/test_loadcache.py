import pytest

from loadcache import LoaderCache


class Counter:
    def __init__(self):
        self.calls = []

    def __call__(self, key):
        self.calls.append(key)
        return key.upper()


def test_second_get_is_a_hit():
    loader = Counter()
    cache = LoaderCache(loader)
    cache.get("a")
    assert cache.get("a") == "A"
    assert loader.calls == ["a"]
    assert (cache.hits, cache.misses) == (1, 1)


def test_get_returns_loaded_value():
    cache = LoaderCache(Counter())
    assert cache.get("user:1") == "USER:1"


def test_capacity_evicts_least_recent():
    cache = LoaderCache(Counter(), capacity=2)
    cache.get("a")
    cache.get("b")
    cache.get("a")
    cache.get("c")
    assert "b" not in cache
    assert "a" in cache and "c" in cache


def test_invalidate():
    cache = LoaderCache(Counter())
    cache.get("a")
    assert cache.invalidate("a") is True
    assert cache.invalidate("a") is False


def test_bad_capacity():
    with pytest.raises(ValueError):
        LoaderCache(Counter(), capacity=0)
