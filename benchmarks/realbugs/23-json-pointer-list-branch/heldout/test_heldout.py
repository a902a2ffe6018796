import pytest

from pointer import PointerError, resolve

DOC = {"items": [10, [20, 21], {"id": "x"}, None, 0], "empty": [], "a/b": {"~": True}}


def test_array_elements():
    assert resolve(DOC, "/items/0") == 10
    assert resolve(DOC, "/items/1/1") == 21
    assert resolve(DOC, "/items/2/id") == "x"


def test_falsy_array_elements():
    assert resolve(DOC, "/items/3") is None
    assert resolve(DOC, "/items/4") == 0
    assert resolve(DOC, "/items/4", default=99) == 0


def test_whole_array():
    assert resolve(DOC, "/items/1") == [20, 21]


def test_array_index_errors():
    with pytest.raises(PointerError):
        resolve(DOC, "/items/5")
    with pytest.raises(PointerError):
        resolve(DOC, "/items/01")
    with pytest.raises(PointerError):
        resolve(DOC, "/empty/0")
    assert resolve(DOC, "/items/-", default="none") == "none"


def test_escaped_keys():
    assert resolve(DOC, "/a~1b/~0") is True


def test_cannot_descend_into_scalar():
    with pytest.raises(PointerError):
        resolve(DOC, "/items/0/x")
